"""Evaluate: the fine-tuned model, the baseline and their mix, scored by the same code on
validation and test with calibrated probabilities (accuracy, macro-F1, weighted-F1, top-3
accuracy, per-class scores, NLL, Brier and ECE before and after calibration), the auto-post
threshold chosen on validation for a target precision and its coverage on test, bootstrap
intervals and a paired verdict, the slices a ledger cares about (vendors never seen in train,
classes without training rows, the chart's levels), the candidate that ships, and the report's
plots. `evaluate` reads from top to bottom as the steps run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import polars as pl

from account_tax.data.features import LABEL_MAP
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
from account_tax.evaluation.shipped import ShippedCandidate
from account_tax.evaluation.tables import PREDICTED_LABEL_ID, predictions_frame
from account_tax.evaluation.unseen_classes import (
    COMPARATOR,
    nearest_class_scores,
    seen_class_macro_f1,
    unseen_class_metrics,
)
from account_tax.io import write_json, write_parquet
from account_tax.settings import EvaluateSettings
from account_tax.training.head_init import class_texts
from account_tax.training.inference import load_classifier, model_temperature, predict_logits
from account_tax.training.model import read_training_info
from account_tax.workflow_run import log_stage, read_run

SPLITS = ("validation", "test")


@dataclass(frozen=True)
class EvaluatePaths:
    """Evaluate's inputs (the first eight) and outputs."""

    model: Path
    validation: Path
    test: Path
    train_records: Path
    test_records: Path
    history: Path
    baseline_model: Path
    baseline_metrics: Path
    metrics: Path
    predictions: Path
    summary: Path
    curves: Path
    confusion: Path
    f1_support: Path
    comparison: Path
    reliability: Path
    precision_coverage: Path

    @property
    def plots(self) -> list[Path]:
        return [
            self.curves,
            self.confusion,
            self.f1_support,
            self.comparison,
            self.reliability,
            self.precision_coverage,
        ]


def evaluate(
    paths: EvaluatePaths,
    settings: dict[str, Any],
    *,
    top_k: int,
    batch_size: int,
    tracking: Path | None = None,
) -> dict[str, Any]:
    """Score, judge and ship; write metrics.json, the test predictions (top `top_k`), the
    summary and the plots; log them into the workflow's MLflow run. Returns the metrics."""
    options = EvaluateSettings.of(settings["evaluate"])
    label_map = json.loads((paths.model / LABEL_MAP).read_text(encoding="utf-8"))
    labels = label_map["labels"]
    splits = {name: read_split(getattr(paths, name), len(labels)) for name in SPLITS}

    scores, weight = score_candidates(paths, splits, len(labels), batch_size)
    review, amounts = ReviewSettings.of(settings["review"]), row_amounts(paths, options)
    reports = {name: assess(view, labels, review, amounts) for name, view in scores.items()}
    reports[ENSEMBLE]["weight"] = weight
    add_unseen_groups(reports, scores, labels, paths, SplitSettings.of(settings["split"]))
    unseen = add_unseen_classes(reports, scores, splits["test"], label_map, paths.train_records)
    add_hierarchy(reports, scores, labels, paths.model)

    comparison = compare(
        reports, scores, len(labels), resamples=options.bootstrap_resamples, seed=options.seed
    )
    shipped = ShippedCandidate.from_dict(
        comparison["shipped"]
        | {
            # What predict needs to reproduce the shipped candidate's probabilities and decisions.
            "threshold": reports[comparison["shipped"]["candidate"]]["review"]["threshold"],
            "baseline_temperature": reports[BASELINE]["temperature"],
            "ensemble_weight": reports[ENSEMBLE]["weight"],
            "ensemble_temperature": reports[ENSEMBLE]["temperature"],
        }
    )
    comparison["shipped"] = shipped.to_dict()
    metrics = {
        **reports[MODEL],
        BASELINE: reports[BASELINE],
        ENSEMBLE: reports[ENSEMBLE],
        "comparison": comparison,
        "unseen_classes": unseen,
    }
    write_json(paths.metrics, metrics)
    test_scores = {name: view["test"] for name, view in scores.items()}
    shipped_test = test_scores[shipped.candidate].calibrated
    test = predictions_frame(splits["test"], shipped_test, top_k, labels)
    write_parquet(
        test.with_columns(pl.lit(shipped.candidate).alias("candidate")), paths.predictions
    )

    draw_plots(paths, reports, test_scores, test, labels)
    run_id = read_run(tracking)["run_id"] if tracking and tracking.exists() else None
    paths.summary.write_text(summary_html(comparison, reports, run_id, unseen), encoding="utf-8")
    log_stage(
        tracking,
        "evaluate",
        tracked_metrics(reports, comparison, unseen),
        [paths.metrics, paths.summary, *paths.plots],
        tags={
            "verdict": str(comparison["verdict"]),
            "shipped_candidate": shipped.candidate,
            "shipped_verdict": str(shipped.verdict),
        },
    )
    return metrics


def score_candidates(
    paths: EvaluatePaths, splits: dict[str, pl.DataFrame], num_labels: int, batch_size: int
) -> tuple[dict[str, dict[str, Scores]], float]:
    """Logits and calibration temperature of the fine-tuned model, the baseline and their mix,
    per split; and the mix's weight, fitted on validation."""
    model, tokenizer, _ = load_classifier(paths.model)
    max_length = read_training_info(paths.model)["settings"]["max_length"]
    temperature = model_temperature(paths.model)
    pipeline = joblib.load(paths.baseline_model)
    baseline = json.loads(paths.baseline_metrics.read_text(encoding="utf-8"))
    scores: dict[str, dict[str, Scores]] = {MODEL: {}, BASELINE: {}}
    for name, split in splits.items():
        texts, y_true = split[TEXT].to_list(), split[LABEL_ID].to_numpy()
        logits = predict_logits(model, tokenizer, texts, batch_size, max_length)
        scores[MODEL][name] = Scores(logits, temperature, y_true)
        scores[BASELINE][name] = Scores(
            baseline_logits(pipeline, texts, num_labels),
            baseline["calibration"]["temperature"],
            y_true,
        )
    scores[ENSEMBLE], weight = ensemble_scores(scores[MODEL], scores[BASELINE])
    return scores, weight


def row_amounts(paths: EvaluatePaths, options: EvaluateSettings) -> np.ndarray | None:
    """The test rows' amounts, for the share of money each decision covers."""
    if not options.amount_column:
        return None
    column = pl.read_parquet(paths.test_records, columns=[options.amount_column])
    return column.to_series().to_numpy()


def add_unseen_groups(
    reports: dict[str, dict[str, Any]],
    scores: dict[str, dict[str, Scores]],
    labels: list[str],
    paths: EvaluatePaths,
    split: SplitSettings,
) -> None:
    """With a split by group (say, vendor): each candidate's scores on the test rows whose group
    never occurs in train, next month's new vendors."""
    if split.strategy != "group":
        return
    group = split.group_column
    seen = pl.read_parquet(paths.train_records, columns=[group]).to_series().drop_nulls()
    in_test = pl.read_parquet(paths.test_records, columns=[group]).to_series()
    unseen = (~in_test.is_in(seen.unique().implode()).fill_null(False)).to_numpy()
    for name, report in reports.items():
        report["test"]["unseen_groups"] = {
            "column": group,
            **slice_metrics(scores[name]["test"], unseen, labels),
        }


def classes_without_training_rows(train_records: Path, label_map: dict) -> np.ndarray:
    """Label ids of the classes with no row in the train split (held out, or never posted)."""
    column = pl.read_parquet(train_records, columns=[label_map["label_column"]]).to_series()
    trained = set(column.unique().to_list())
    return np.array([i for i, code in enumerate(label_map["labels"]) if code not in trained])


def add_unseen_classes(
    reports: dict[str, dict[str, Any]],
    scores: dict[str, dict[str, Scores]],
    test: pl.DataFrame,
    label_map: dict[str, Any],
    train_records: Path,
) -> dict[str, Any] | None:
    """Classes with test rows but none in train (evaluate.holdout_classes, or a split by date or
    group): each candidate ranks them among all classes, beside the nearest class by its text.
    Returns the comparator's report, None when test has no such class."""
    unseen = classes_without_training_rows(train_records, label_map)
    truth = test[LABEL_ID].to_numpy()
    if not np.isin(truth, unseen).any():
        return None
    for name, view in scores.items():
        calibrated = view["test"].calibrated
        reports[name]["test"]["unseen_classes"] = {
            **unseen_class_metrics(calibrated, truth, unseen),
            "seen_classes_macro_f1": seen_class_macro_f1(calibrated, truth, unseen),
        }
    comparator = nearest_class_scores(class_texts(label_map), test[TEXT].to_list())
    labels = label_map["labels"]
    return {
        "classes": sorted(labels[i] for i in np.intersect1d(unseen, truth)),
        COMPARATOR: unseen_class_metrics(comparator, truth, unseen),
    }


def add_hierarchy(
    reports: dict[str, dict[str, Any]],
    scores: dict[str, dict[str, Scores]],
    labels: list[str],
    model: Path,
) -> None:
    """With a chart of parents: scores at each level of the chart and "right group, wrong
    account" (account_tax.evaluation.hierarchy)."""
    parents = read_parents(model / LABEL_MAP)
    if parents is None:
        return
    for name, view in scores.items():
        reports[name]["hierarchy"] = {
            split: hierarchy_metrics(s.y_true, s.calibrated, labels, parents)
            for split, s in view.items()
        }


def draw_plots(
    paths: EvaluatePaths,
    reports: dict[str, dict[str, Any]],
    test_scores: dict[str, Scores],
    test: pl.DataFrame,
    labels: list[str],
) -> None:
    """The report's plots: training curves, the shipped candidate's confusion matrix, per-class
    F1 against support, the comparison with the baseline, reliability and precision-coverage."""
    exported = read_training_info(paths.model).get("exported") or {}
    plot_training_curves(read_history(paths.history), paths.curves, exported.get("step"))
    plot_confusion_matrix(
        test[LABEL_ID].to_numpy(), test[PREDICTED_LABEL_ID].to_numpy(), labels, paths.confusion
    )
    plot_f1_vs_support(
        {name: report["test"]["per_class"] for name, report in reports.items()}, paths.f1_support
    )
    plot_baseline_comparison(reports, paths.comparison)
    test_curves = curves(test_scores)
    plot_reliability(test_curves, paths.reliability)
    plot_precision_coverage(
        test_curves,
        {name: report["review"] for name, report in reports.items()},
        paths.precision_coverage,
    )
