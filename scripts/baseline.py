"""Baseline: TF-IDF word and character n-grams with a linear classifier (settings from the
config's `baseline` section), trained on train and scored on validation and test like the
fine-tuned model. Writes the fitted pipeline (joblib), metrics JSON, test predictions and the
evidence index (the train and validation records' TF-IDF rows)."""

from pathlib import Path

from account_tax import cli
from account_tax.evaluation.baseline import BaselinePaths, BaselineSettings, summary, train_baseline
from account_tax.stage_log import log_stage


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--train", type=Path, required=True, help="serialized train split")
    parser.add_argument("--validation", type=Path, required=True, help="serialized validation")
    parser.add_argument("--test", type=Path, required=True, help="serialized test split")
    parser.add_argument("--label-map", type=Path, required=True, help="label map JSON")
    parser.add_argument("--model-output", type=Path, required=True, help="fitted pipeline")
    parser.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")
    parser.add_argument(
        "--predictions", type=Path, required=True, help="test-set predictions Parquet to write"
    )
    parser.add_argument(
        "--evidence", type=Path, required=True, help="evidence index folder to write"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads fitting the per-class problems (the result does not depend on it)",
    )
    args = parser.parse_args()
    paths = BaselinePaths(
        train=args.train,
        validation=args.validation,
        test=args.test,
        label_map=args.label_map,
        model=args.model_output,
        metrics=args.metrics,
        predictions=args.predictions,
        evidence=args.evidence,
    )
    settings = BaselineSettings.of(args.settings["baseline"])
    report = train_baseline(paths, settings, args.threads)
    log_stage(args.tracking, "baseline", summary(report), artifacts=[args.metrics])


if __name__ == "__main__":
    cli.run(main)
