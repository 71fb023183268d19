"""Correct: apply reviewed rows (data.corrections) to the clean ledger. A correction replaces its
record's account, a reviewed record the ledger lacks (with all its columns) joins it cleaned,
and every record says where its label came from (`label_source`); a row that
cannot be applied goes to the rejects file with its reason, and of two corrections of a record
the latest counts. rows in = applied + added + rejected, checked. Corrections that say what was
suggested (predict's review files, filled in) make the track record evaluate weighs."""

from dataclasses import asdict
from pathlib import Path

from account_tax import cli
from account_tax.data.clean import CleanCounts, CleanSettings
from account_tax.data.corrections import apply_corrections, correction_summary
from account_tax.data.spec import DataSpec
from account_tax.io import write_json
from account_tax.stage_log import log_stage


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--input", type=Path, required=True, help="clean records Parquet")
    parser.add_argument(
        "--clean-counts", type=Path, required=True, help="clean's row counts JSON (rows in)"
    )
    parser.add_argument(
        "--corrections", type=Path, nargs="+", required=True, help="corrections files"
    )
    parser.add_argument("--output", type=Path, required=True, help="corrected records Parquet")
    parser.add_argument("--rejects", type=Path, required=True, help="rows not applied Parquet")
    parser.add_argument("--counts", type=Path, required=True, help="row counts JSON")
    parser.add_argument(
        "--track-record", type=Path, required=True, help="reviewed suggestions Parquet"
    )
    parser.add_argument("--summary", type=Path, required=True, help="counts and reasons TSV")
    args = parser.parse_args()
    counts = apply_corrections(
        args.input,
        args.corrections,
        DataSpec.from_config(args.settings),
        CleanSettings.of(args.settings["clean"]),
        args.output,
        args.rejects,
        args.track_record,
        ledger_rows=CleanCounts.read(args.clean_counts).rows_in,
    )
    write_json(args.counts, asdict(counts))
    summary = correction_summary(counts, args.rejects, args.track_record)
    args.summary.write_text(summary, encoding="utf-8")
    log_stage(args.tracking, "correct", asdict(counts), [args.counts, args.summary])


if __name__ == "__main__":
    cli.run(main)
