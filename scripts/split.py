"""Split: train/validation/test by `split.strategy` (stratified by class, by date with the latest
dates held out, or by group with no group in two splits), deterministic by seed. split_report.json
gives the per-class counts, a sha256 of each split's rows, the date range or group count of each
split, the classes held out of train and validation (`evaluate.holdout_classes`), and the classes
in validation or test but not in train. A warm start's split (--init-model) keeps in train every
record that model has learned."""

from pathlib import Path

from account_tax import cli
from account_tax.data.plots import plot_split_distribution
from account_tax.data.spec import DataSpec
from account_tax.data.split import SplitSettings, counts_table, read_trained_rows, split
from account_tax.settings import EvaluateSettings
from account_tax.stage_log import log_stage


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--input", type=Path, required=True, help="records with features")
    parser.add_argument("--out-dir", type=Path, required=True, help="folder for the split files")
    parser.add_argument("--plot", type=Path, required=True, help="per-split distribution PNG")
    parser.add_argument("--counts-table", type=Path, required=True, help="per-class counts TSV")
    parser.add_argument(
        "--init-model", type=Path, help="a warm start's model: its records stay in train"
    )
    args = parser.parse_args()
    spec = DataSpec.from_config(args.settings)
    options = SplitSettings.of(args.settings["split"])
    holdout = EvaluateSettings.of(args.settings["evaluate"]).holdout_classes
    learned = read_trained_rows(args.init_model)["id"] if args.init_model else None
    report = split(args.input, spec, options, args.out_dir, holdout, learned)
    plot_split_distribution(report["per_class"], args.plot)
    args.counts_table.write_text(counts_table(report), encoding="utf-8")
    metrics = {f"{name}_rows": split["rows"] for name, split in report["splits"].items()}
    metrics["train_only_classes"] = len(report["train_only_classes"])
    metrics["holdout_classes"] = len(report["holdout_classes"])
    if learned is not None:
        metrics["learned_rows_moved_to_train"] = report["learned_rows_moved_to_train"]
    for name, classes in report["classes_not_in_train"].items():
        metrics[f"{name}_classes_not_in_train"] = len(classes)
    log_stage(args.tracking, "split", metrics, [args.out_dir / "split_report.json", args.plot])


if __name__ == "__main__":
    cli.run(main)
