"""Gather the shards of a prediction into one predictions file, one rejects file (both in input
order) and one file of the rows to review, least confident first (sorted `predict.chunk_rows`
rows at a time), with its copy for spreadsheets (CSV or an Excel workbook,
`predict.review_format`); check that every input row is in the predictions or the rejects, and
log the counts."""

from pathlib import Path

from account_tax import cli
from account_tax.data.label_map import LABEL_MAP
from account_tax.evaluation.prediction_parts import (
    PredictPaths,
    PredictSettings,
    gather_parts,
    write_review_csv,
    write_review_workbook,
)
from account_tax.evaluation.shipped import read_shipped
from account_tax.stage_log import log_stage
from account_tax.training.training_info import read_training_info


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--records", type=Path, required=True, help="new records as ingest wrote them"
    )
    parser.add_argument("--model", type=Path, required=True, help="trained model folder")
    parser.add_argument("--evaluation", type=Path, required=True, help="evaluate's metrics")
    for name in ("predictions", "rejects", "review"):
        parser.add_argument(f"--{name}-parts", type=Path, nargs="+", required=True)
    parser.add_argument("--output", type=Path, required=True, help="predictions Parquet")
    parser.add_argument("--rejects", type=Path, required=True, help="rejected rows Parquet")
    parser.add_argument("--review", type=Path, required=True, help="rows to review Parquet")
    parser.add_argument(
        "--review-sheet",
        type=Path,
        required=True,
        help="rows to review for spreadsheets: .csv or .xlsx (predict.review_format)",
    )
    args = parser.parse_args()
    parts = [
        PredictPaths(*files)
        for files in zip(args.predictions_parts, args.rejects_parts, args.review_parts, strict=True)
    ]
    settings = PredictSettings.of(args.settings["predict"])
    counts = gather_parts(
        parts,
        args.records,
        PredictPaths(args.output, args.rejects, args.review),
        settings.chunk_rows,
    )
    if settings.review_format == "xlsx":
        write_review_workbook(
            args.review, args.review_sheet, args.model / LABEL_MAP, settings.chunk_rows
        )
    else:
        write_review_csv(args.review, args.review_sheet, settings.review_csv_separator)
    log_stage(
        args.tracking,
        f"predict/{args.output.stem}",
        counts,
        tags={
            "training_run_id": str(read_training_info(args.model).get("mlflow_run_id")),
            "candidate": read_shipped(args.evaluation).candidate,
        },
    )


if __name__ == "__main__":
    cli.run(main)
