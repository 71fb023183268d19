"""Evaluate: the fine-tuned model on validation and test, with the same metrics as the baseline
and side by side with it (accuracy, macro-F1, weighted-F1, top-3 accuracy, per-class scores),
plus the report's plots: training curves, confusion matrix, per-class F1 against support, and
the baseline comparison with a written verdict."""

import json
from pathlib import Path

import torch

from account_tax import cli
from account_tax.evaluation import HEADLINE, compare, score_model, summary_html
from account_tax.evaluation_plots import (
    plot_baseline_comparison,
    plot_confusion_matrix,
    plot_f1_vs_support,
    plot_training_curves,
    read_history,
)
from account_tax.io import write_json, write_parquet
from account_tax.predictions import PREDICTED_LABEL_ID
from account_tax.serialize import LABEL_ID
from account_tax.tracking import log_stage, read_run


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--model", type=Path, required=True, help="trained model folder")
    parser.add_argument("--validation", type=Path, required=True, help="serialized validation")
    parser.add_argument("--test", type=Path, required=True, help="serialized test split")
    parser.add_argument("--history", type=Path, required=True, help="training history")
    parser.add_argument("--baseline-metrics", type=Path, required=True, help="baseline metrics")
    parser.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")
    parser.add_argument("--predictions", type=Path, required=True, help="test predictions")
    parser.add_argument("--summary", type=Path, required=True, help="verdict and table (HTML)")
    parser.add_argument("--curves", type=Path, required=True, help="loss and lr curves PNG")
    parser.add_argument("--confusion", type=Path, required=True, help="confusion matrix PNG")
    parser.add_argument("--f1-support", type=Path, required=True, help="F1 against support PNG")
    parser.add_argument("--comparison", type=Path, required=True, help="baseline comparison PNG")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--batch-size", type=int, default=64, help="texts per inference batch")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    splits = {"validation": args.validation, "test": args.test}
    report, predictions = score_model(args.model, splits, args.batch_size)
    baseline = json.loads(args.baseline_metrics.read_text(encoding="utf-8"))
    comparison = compare(report, baseline)
    write_json(args.metrics, {**report, "baseline": baseline, "comparison": comparison})
    write_parquet(predictions["test"], args.predictions)

    labels = json.loads((args.model / "label_map.json").read_text(encoding="utf-8"))["labels"]
    test = predictions["test"]
    plot_training_curves(read_history(args.history), args.curves)
    plot_confusion_matrix(
        test[LABEL_ID].to_numpy(), test[PREDICTED_LABEL_ID].to_numpy(), labels, args.confusion
    )
    plot_f1_vs_support(
        {"fine-tuned": report["test"]["per_class"], "baseline": baseline["test"]["per_class"]},
        args.f1_support,
    )
    plot_baseline_comparison({"fine-tuned": report, "baseline": baseline}, args.comparison)
    run_id = read_run(args.tracking)["run_id"] if args.tracking and args.tracking.exists() else None
    args.summary.write_text(summary_html(comparison, run_id), encoding="utf-8")

    metrics = {
        f"{split}_{metric}": report[split][metric]
        for split in splits
        for metric in HEADLINE
        if report[split][metric] is not None
    }
    if comparison["model_beats_baseline"] is not None:
        metrics["beats_baseline"] = float(comparison["model_beats_baseline"])
    plots = [args.curves, args.confusion, args.f1_support, args.comparison]
    log_stage(args.tracking, "evaluate", metrics, [args.metrics, args.summary, *plots])


if __name__ == "__main__":
    cli.run(main)
