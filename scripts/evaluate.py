"""Evaluate: the fine-tuned model and the baseline, scored by the same code on validation and test
with calibrated probabilities (accuracy, macro-F1, weighted-F1, top-3 accuracy, per-class scores,
NLL, Brier and ECE before and after calibration), the auto-post threshold chosen on validation
for a target precision and its coverage on test, bootstrap intervals and a paired verdict, the
classes with no training rows apart (against the nearest class by TF-IDF of the class texts), plus
the report's plots: training curves, confusion matrix, per-class F1 against support, the baseline
comparison, a reliability diagram and a precision-coverage curve."""

import json
from pathlib import Path

import joblib
import numpy as np
import polars as pl
import torch

from account_tax import cli
from account_tax.data.serialize import LABEL_ID, TEXT, read_split
from account_tax.data.split import SplitSettings
from account_tax.evaluation.assessment import (
    BASELINE,
    ENSEMBLE,
    MODEL,
    ReviewSettings,
    Scores,
    assess,
    compare,
    curves,
    ensemble_scores,
    slice_metrics,
    summary_html,
    tracked_metrics,
)
from account_tax.evaluation.baseline import baseline_logits
from account_tax.evaluation.hierarchy import hierarchy_metrics, read_parents
from account_tax.evaluation.plots import (
    plot_baseline_comparison,
    plot_confusion_matrix,
    plot_f1_vs_support,
    plot_precision_coverage,
    plot_reliability,
    plot_training_curves,
    read_history,
)
from account_tax.evaluation.tables import PREDICTED_LABEL_ID, predictions_frame
from account_tax.evaluation.unseen_classes import (
    COMPARATOR,
    nearest_class_scores,
    seen_class_macro_f1,
    unseen_class_metrics,
)
from account_tax.io import write_json, write_parquet
from account_tax.settings import EvaluateSettings
from account_tax.tracking.workflow_run import log_stage, read_run
from account_tax.training.head_init import class_texts
from account_tax.training.inference import load_classifier, model_temperature, predict_logits
from account_tax.training.model import LABEL_MAP, read_training_info


def classes_without_training_rows(train_records: Path, label_map: dict) -> np.ndarray:
    """Label ids of the classes with no row in the train split (held out, or never posted)."""
    column = pl.read_parquet(train_records, columns=[label_map["label_column"]]).to_series()
    trained = set(column.unique().to_list())
    return np.array([i for i, code in enumerate(label_map["labels"]) if code not in trained])


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--model", type=Path, required=True, help="trained model folder")
    parser.add_argument("--validation", type=Path, required=True, help="serialized validation")
    parser.add_argument("--test", type=Path, required=True, help="serialized test split")
    parser.add_argument("--train-records", type=Path, required=True, help="split train records")
    parser.add_argument("--test-records", type=Path, required=True, help="split test records")
    parser.add_argument("--history", type=Path, required=True, help="training history")
    parser.add_argument("--baseline-model", type=Path, required=True, help="baseline pipeline")
    parser.add_argument("--baseline-metrics", type=Path, required=True, help="baseline metrics")
    parser.add_argument("--metrics", type=Path, required=True, help="metrics JSON to write")
    parser.add_argument("--predictions", type=Path, required=True, help="test predictions")
    parser.add_argument("--summary", type=Path, required=True, help="verdict and table (HTML)")
    parser.add_argument("--curves", type=Path, required=True, help="loss and lr curves PNG")
    parser.add_argument("--confusion", type=Path, required=True, help="confusion matrix PNG")
    parser.add_argument("--f1-support", type=Path, required=True, help="F1 against support PNG")
    parser.add_argument("--comparison", type=Path, required=True, help="baseline comparison PNG")
    parser.add_argument("--reliability", type=Path, required=True, help="reliability diagram PNG")
    parser.add_argument(
        "--precision-coverage", type=Path, required=True, help="precision-coverage curve PNG"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--batch-size", type=int, default=64, help="texts per inference batch")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    review = ReviewSettings.of(args.settings["review"])
    options = EvaluateSettings.of(args.settings["evaluate"])

    model, tokenizer, labels = load_classifier(args.model)
    max_length = read_training_info(args.model)["settings"]["max_length"]
    temperature = model_temperature(args.model)
    pipeline = joblib.load(args.baseline_model)
    baseline_report = json.loads(args.baseline_metrics.read_text(encoding="utf-8"))
    splits = {
        name: read_split(path, len(labels))
        for name, path in {"validation": args.validation, "test": args.test}.items()
    }
    scores = {MODEL: {}, BASELINE: {}}
    for name, split in splits.items():
        texts, y_true = split[TEXT].to_list(), split[LABEL_ID].to_numpy()
        logits = predict_logits(model, tokenizer, texts, args.batch_size, max_length)
        scores[MODEL][name] = Scores(logits, temperature, y_true)
        scores[BASELINE][name] = Scores(
            baseline_logits(pipeline, texts, len(labels)),
            baseline_report["calibration"]["temperature"],
            y_true,
        )
    scores[ENSEMBLE], weight = ensemble_scores(scores[MODEL], scores[BASELINE])
    amounts = None
    if options.amount_column:
        column = pl.read_parquet(args.test_records, columns=[options.amount_column])
        amounts = column.to_series().to_numpy()
    reports = {name: assess(view, labels, review, amounts) for name, view in scores.items()}
    split_options = SplitSettings.of(args.settings["split"])
    if split_options.strategy == "group":
        # The test rows whose group (say, vendor) never occurs in train: next month's new vendors.
        group = split_options.group_column
        seen = pl.read_parquet(args.train_records, columns=[group]).to_series().drop_nulls()
        in_test = pl.read_parquet(args.test_records, columns=[group]).to_series()
        unseen = (~in_test.is_in(seen.unique().implode()).fill_null(False)).to_numpy()
        for name, report in reports.items():
            report["test"]["unseen_groups"] = {
                "column": group,
                **slice_metrics(scores[name]["test"], unseen, labels),
            }
    label_map = json.loads((args.model / LABEL_MAP).read_text(encoding="utf-8"))
    unseen = classes_without_training_rows(args.train_records, label_map)
    test_truth = splits["test"][LABEL_ID].to_numpy()
    unseen_report = None
    if np.isin(test_truth, unseen).any():
        # Classes with test rows but none in train (evaluate.holdout_classes, or a split by date
        # or group): ranked among all classes, beside the nearest class by its text.
        for name, view in scores.items():
            reports[name]["test"]["unseen_classes"] = {
                **unseen_class_metrics(view["test"].calibrated, test_truth, unseen),
                "seen_classes_macro_f1": seen_class_macro_f1(
                    view["test"].calibrated, test_truth, unseen
                ),
            }
        comparator = nearest_class_scores(class_texts(label_map), splits["test"][TEXT].to_list())
        unseen_report = {
            "classes": sorted(labels[i] for i in np.intersect1d(unseen, test_truth)),
            COMPARATOR: unseen_class_metrics(comparator, test_truth, unseen),
        }
    parents = read_parents(args.model / LABEL_MAP)
    if parents is not None:
        # The chart of accounts' levels and "right group, wrong account"
        # (account_tax.evaluation.hierarchy).
        for name, view in scores.items():
            reports[name]["hierarchy"] = {
                split: hierarchy_metrics(s.y_true, s.calibrated, labels, parents)
                for split, s in view.items()
            }
    test_scores = {name: view["test"] for name, view in scores.items()}
    comparison = compare(
        reports,
        scores,
        len(labels),
        resamples=options.bootstrap_resamples,
        seed=options.seed,
    )
    reports[ENSEMBLE]["weight"] = weight
    shipped = comparison["shipped"]["candidate"]
    # What predict needs to reproduce the shipped candidate's probabilities and decisions.
    comparison["shipped"] |= {
        "threshold": reports[shipped]["review"]["threshold"],
        "baseline_temperature": reports[BASELINE]["temperature"],
        "ensemble_weight": weight,
        "ensemble_temperature": reports[ENSEMBLE]["temperature"],
    }
    write_json(
        args.metrics,
        {
            **reports[MODEL],
            BASELINE: reports[BASELINE],
            ENSEMBLE: reports[ENSEMBLE],
            "comparison": comparison,
            "unseen_classes": unseen_report,
        },
    )
    test = predictions_frame(splits["test"], test_scores[shipped].calibrated, 3, labels)
    write_parquet(test.with_columns(pl.lit(shipped).alias("candidate")), args.predictions)

    exported = read_training_info(args.model).get("exported") or {}
    plot_training_curves(read_history(args.history), args.curves, exported.get("step"))
    plot_confusion_matrix(
        test[LABEL_ID].to_numpy(), test[PREDICTED_LABEL_ID].to_numpy(), labels, args.confusion
    )
    plot_f1_vs_support(
        {name: report["test"]["per_class"] for name, report in reports.items()}, args.f1_support
    )
    plot_baseline_comparison(reports, args.comparison)
    test_curves = curves(test_scores)
    plot_reliability(test_curves, args.reliability)
    plot_precision_coverage(
        test_curves,
        {name: report["review"] for name, report in reports.items()},
        args.precision_coverage,
    )
    run_id = read_run(args.tracking)["run_id"] if args.tracking and args.tracking.exists() else None
    args.summary.write_text(
        summary_html(comparison, reports, run_id, unseen_report), encoding="utf-8"
    )

    metrics = tracked_metrics(reports, comparison, unseen_report)
    plots = [
        args.curves,
        args.confusion,
        args.f1_support,
        args.comparison,
        args.reliability,
        args.precision_coverage,
    ]
    log_stage(
        args.tracking,
        "evaluate",
        metrics,
        [args.metrics, args.summary, *plots],
        tags={
            "verdict": str(comparison["verdict"]),
            "shipped_candidate": shipped,
            "shipped_verdict": str(comparison["shipped"].get("verdict")),
        },
    )


if __name__ == "__main__":
    cli.run(main)
