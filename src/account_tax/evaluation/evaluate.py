"""Evaluate: the fine-tuned model, the baseline and their mix, scored by the same code on
validation and test with calibrated probabilities (accuracy, macro-F1, weighted-F1, top-3
accuracy, per-class scores, NLL, Brier and ECE before and after calibration), the auto-post
threshold chosen on validation for a target precision and its coverage on test, bootstrap
intervals and a paired verdict, the slices a ledger cares about (vendors never seen in train,
classes without training rows, the chart's levels), the candidate that ships, and the report's
plots. `evaluate` reads from top to bottom as the steps run."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import polars as pl
from sklearn.pipeline import Pipeline

from account_tax.data.label_map import LABEL_MAP, LabelMap
from account_tax.data.serialize import ID, LABEL_ID, TEXT, read_split
from account_tax.data.split import SplitSettings
from account_tax.errors import DataError
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
from account_tax.evaluation.baseline import classifier_logits
from account_tax.evaluation.evidence import (
    EVIDENCE_SPACE,
    NOVEL,
    baseline_features,
    evidence_columns,
    evidence_html,
    is_novel,
    novelty_threshold,
    weighing_ngrams,
)
from account_tax.evaluation.hierarchy import hierarchy_metrics
from account_tax.evaluation.plots import (
    plot_baseline_comparison,
    plot_confusion_matrix,
    plot_f1_vs_support,
    plot_nothing,
    plot_precision_coverage,
    plot_reliability,
    plot_training_curves,
)
from account_tax.evaluation.predict import CANDIDATE
from account_tax.evaluation.review import (
    DECISION,
    DECISION_REASON,
    TrackRecord,
    decision_of,
    decision_reasons,
)
from account_tax.evaluation.shipped import ShippedCandidate
from account_tax.evaluation.tables import CONFIDENCE, PREDICTED_LABEL_ID, predictions_frame
from account_tax.evaluation.unseen_classes import (
    COMPARATOR,
    nearest_class_scores,
    seen_class_macro_f1,
    unseen_class_metrics,
)
from account_tax.io import write_json, write_parquet
from account_tax.settings import EvaluateSettings
from account_tax.stage_log import log_stage, read_run
from account_tax.training.evidence import ACCOUNT, INDEX_DIR, EvidenceIndex, Neighbours, Vectors
from account_tax.training.history import read_history
from account_tax.training.inference import load_classifier, model_temperature, score_texts
from account_tax.training.training_info import read_training_info

SPLITS = ("validation", "test")


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluatePaths:
    """Evaluate's inputs (the first nine, and the track record where corrections flow in) and
    outputs."""

    model: Path
    validation: Path
    test: Path
    train_records: Path
    test_records: Path
    history: Path
    baseline_model: Path
    baseline_metrics: Path
    baseline_evidence: Path
    metrics: Path
    predictions: Path
    summary: Path
    curves: Path
    confusion: Path
    f1_support: Path
    comparison: Path
    reliability: Path
    precision_coverage: Path
    track_record: Path | None = None

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


def warn_nothing_posted(candidate: str, report: dict[str, Any]) -> None:
    """Say why the shipped candidate posts nothing automatically, and what would change it."""
    review, accuracy = report["review"], report["validation"]["accuracy"]
    if review["rows_needed"] is None:
        needed = "no count of rows can show a precision of 1"
        remedy = "A review.target_precision below 1"
    else:
        needed = f"a threshold needs at least {review['rows_needed']} rows above it, all right"
        remedy = (
            "More validation rows (split.validation_fraction), reviewed suggestions coming"
            " back as corrections (predict's review files), or a lower review.confidence_level"
        )
    supported = review["highest_supported_target"]
    if supported is not None:
        remedy += (
            f"; these rows support a review.target_precision of {supported['target_precision']:.3f}"
            f" at most (posting {supported['coverage']:.1%} of them)"
        )
    log.warning(
        "nothing will be posted automatically: on validation and the track record no confidence"
        " threshold leaves %s's rows right at least %s of the time with confidence %s (accuracy"
        " %s on %d validation rows, %d reviewed suggestions; %s). %s can change that.",
        candidate,
        review["target_precision"],
        review["confidence_level"],
        "-" if accuracy is None else f"{accuracy:.3f}",
        review["validation"]["rows"],
        review["track_record"]["rows"],
        needed,
        remedy,
    )


def evaluate(
    paths: EvaluatePaths,
    settings: dict[str, Any],
    *,
    top_k: int,
    evidence_k: int,
    batch_size: int,
    tracking: Path | None = None,
) -> dict[str, Any]:
    """Score, judge and ship; write metrics.json, the test predictions (top `top_k`, with their
    evidence), the summary and the plots; log them into the workflow's MLflow run. Returns the
    metrics."""
    options = EvaluateSettings.of(settings["evaluate"])
    label_map = LabelMap.read(paths.model / LABEL_MAP)
    labels = label_map.labels
    splits = {name: read_split(getattr(paths, name), len(labels)) for name in SPLITS}

    pipeline = joblib.load(paths.baseline_model)
    scores, weight, vectors = score_candidates(paths, pipeline, splits, label_map, batch_size)
    review, amounts = ReviewSettings.of(settings["review"]), row_amounts(paths, options)
    indexes = {
        MODEL: EvidenceIndex.read(paths.model / INDEX_DIR),
        BASELINE: EvidenceIndex.read(paths.baseline_evidence),
    }
    neighbours = find_neighbours(indexes, vectors, evidence_k)
    novelty = mark_novel(scores, neighbours, indexes, labels, review.novelty_quantile)
    scored_ids = pl.concat([splits["validation"][ID], splits["test"][ID]])
    track_record = TrackRecord.read(paths.track_record, scored_ids)
    reports = {
        name: assess(view, labels, review, amounts, track_record) for name, view in scores.items()
    }
    reports[ENSEMBLE]["weight"] = weight
    for name, report in reports.items():
        report["novelty"] = novelty[name]
    add_unseen_groups(reports, scores, labels, paths, SplitSettings.of(settings["split"]))
    unseen = add_unseen_classes(reports, scores, splits["test"], label_map, paths.train_records)
    add_hierarchy(reports, scores, label_map)

    comparison = compare(
        reports, scores, len(labels), resamples=options.bootstrap_resamples, seed=options.seed
    )
    chosen = comparison["shipped"]["candidate"]
    shipped = ShippedCandidate.from_dict(
        comparison["shipped"]
        | {
            # What predict needs to reproduce the shipped candidate's probabilities and decisions.
            "threshold": reports[chosen]["review"]["threshold"],
            "novelty_threshold": novelty[chosen]["threshold"],
            "baseline_temperature": reports[BASELINE]["temperature"],
            "ensemble_weight": reports[ENSEMBLE]["weight"],
            "ensemble_temperature": reports[ENSEMBLE]["temperature"],
        }
    )
    comparison["shipped"] = shipped.to_dict()
    if shipped.threshold is None:
        warn_nothing_posted(shipped.candidate, reports[chosen])
    metrics = {
        **reports[MODEL],
        BASELINE: reports[BASELINE],
        ENSEMBLE: reports[ENSEMBLE],
        "comparison": comparison,
        "unseen_classes": unseen,
    }
    write_json(paths.metrics, metrics)
    test_scores = {name: view["test"] for name, view in scores.items()}
    shipped_test = test_scores[shipped.candidate]
    test = predictions_frame(
        splits["test"], shipped_test.calibrated, top_k, labels, label_map.postable_mask()
    )
    test = test.with_columns(
        splits["test"][TEXT],
        pl.lit(shipped.candidate).alias(CANDIDATE),
        *shipped_evidence(pipeline, shipped, indexes, vectors, neighbours, test, labels),
    )
    reasons = decision_reasons(
        test[CONFIDENCE].to_numpy(), shipped.threshold, test[NOVEL].to_numpy()
    )
    test = test.with_columns(
        pl.Series(DECISION, decision_of(reasons), dtype=pl.String),
        pl.Series(DECISION_REASON, reasons, dtype=pl.String),
    )
    write_parquet(test, paths.predictions)

    draw_plots(paths, reports, test_scores, test, labels)
    run_id = read_run(tracking)["run_id"] if tracking and tracking.exists() else None
    paths.summary.write_text(
        summary_html(comparison, reports, run_id, unseen, evidence_html(test)), encoding="utf-8"
    )
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
    paths: EvaluatePaths,
    pipeline: Pipeline,
    splits: dict[str, pl.DataFrame],
    label_map: LabelMap,
    batch_size: int,
) -> tuple[dict[str, dict[str, Scores]], float, dict[str, dict[str, Vectors]]]:
    """Logits and calibration temperature of the fine-tuned model, the baseline (its fitted
    `pipeline`) and their mix, per split; the mix's weight, fitted on validation; and the
    splits' vectors in the model's and the baseline's evidence spaces (pooled embeddings,
    TF-IDF rows)."""
    model, tokenizer, _ = load_classifier(paths.model)
    max_length = read_training_info(paths.model)["settings"]["max_length"]
    temperature = model_temperature(paths.model)
    postable = label_map.postable_mask()
    baseline = json.loads(paths.baseline_metrics.read_text(encoding="utf-8"))
    scores: dict[str, dict[str, Scores]] = {MODEL: {}, BASELINE: {}}
    vectors: dict[str, dict[str, Vectors]] = {MODEL: {}, BASELINE: {}}
    for name, split in splits.items():
        texts, y_true = split[TEXT].to_list(), split[LABEL_ID].to_numpy()
        logits, vectors[MODEL][name] = score_texts(model, tokenizer, texts, batch_size, max_length)
        unscored = int((~np.isfinite(logits).all(axis=1)).sum())
        if unscored:
            # A NaN would pass as a confidence: its threshold NaN, nothing ever posted, unsaid.
            raise DataError(
                f"{paths.model}: {unscored} of the {len(texts)} {name} rows get logits that are"
                " not finite numbers (a training run that diverged?): train it again"
            )
        scores[MODEL][name] = Scores(logits, temperature, y_true, postable=postable)
        vectors[BASELINE][name] = baseline_features(pipeline, texts)
        scores[BASELINE][name] = Scores(
            classifier_logits(pipeline, vectors[BASELINE][name], len(label_map.labels)),
            baseline["calibration"]["temperature"],
            y_true,
            postable=postable,
        )
    scores[ENSEMBLE], weight = ensemble_scores(scores[MODEL], scores[BASELINE])
    return scores, weight, vectors


def find_neighbours(
    indexes: dict[str, EvidenceIndex], vectors: dict[str, dict[str, Vectors]], k: int
) -> dict[str, dict[str, Neighbours]]:
    """Per evidence space, the nearest indexed records of each split's rows: validation's among
    the train records only (a validation record would be its own neighbour), test's among all,
    as predict searches."""
    return {
        space: {
            "validation": index.part("train").nearest(vectors[space]["validation"], 1),
            "test": index.nearest(vectors[space]["test"], k),
        }
        for space, index in indexes.items()
    }


def mark_novel(
    scores: dict[str, dict[str, Scores]],
    neighbours: dict[str, dict[str, Neighbours]],
    indexes: dict[str, EvidenceIndex],
    labels: list[str],
    quantile: float,
) -> dict[str, dict[str, Any]]:
    """Fit each candidate's novelty threshold on validation, mark the novel rows of both splits
    in its scores (so they are never posted), and report what the rule does on test: how many
    rows are novel, the accuracy on them and on the others, and how often the nearest record's
    account is the suggestion."""
    novelty = {}
    for name, view in scores.items():
        space = EVIDENCE_SPACE[name]
        nearest = {split: found.similarities[:, 0] for split, found in neighbours[space].items()}
        _, correct = view["validation"].confidence_and_correct()
        threshold = novelty_threshold(nearest["validation"], correct, quantile)
        for split in SPLITS:
            view[split] = dataclasses.replace(
                view[split], novel=is_novel(nearest[split], threshold)
            )
        test = view["test"]
        _, right = test.confidence_and_correct()
        nearest_account = (
            indexes[space].records[ACCOUNT].to_numpy()[neighbours[space]["test"].rows[:, 0]]
        )
        suggested = np.asarray(labels, dtype=object)[test.calibrated.argmax(axis=1)]
        novelty[name] = {
            "quantile": quantile,
            "threshold": threshold,
            "evidence_space": space,
            "validation_novel_rows": int(view["validation"].novel.sum()),
            "test_rows": len(right),
            "test_novel_rows": int(test.novel.sum()),
            "test_novel_accuracy": mean_or_none(right[test.novel]),
            "test_other_accuracy": mean_or_none(right[~test.novel]),
            "test_nearest_agrees": mean_or_none(nearest_account == suggested),
        }
    return novelty


def mean_or_none(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


def shipped_evidence(
    pipeline: Pipeline,
    shipped: ShippedCandidate,
    indexes: dict[str, EvidenceIndex],
    vectors: dict[str, dict[str, Vectors]],
    neighbours: dict[str, dict[str, Neighbours]],
    test: pl.DataFrame,
    labels: list[str],
) -> list[pl.Series]:
    """The shipped candidate's evidence for each test row, as predict gives it."""
    space = EVIDENCE_SPACE[shipped.candidate]
    predicted = test[PREDICTED_LABEL_ID].to_numpy()
    ngrams = None
    if shipped.candidate != MODEL:
        ngrams = weighing_ngrams(pipeline, vectors[BASELINE]["test"], predicted)
    return evidence_columns(
        indexes[space],
        neighbours[space]["test"],
        [labels[i] for i in predicted],
        shipped.novelty_threshold,
        ngrams,
    )


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


def classes_without_training_rows(train_records: Path, label_map: LabelMap) -> np.ndarray:
    """Label ids of the classes with no row in the train split (held out, or never posted)."""
    column = pl.read_parquet(train_records, columns=[label_map.label_column]).to_series()
    trained = set(column.unique().to_list())
    return np.array([i for i, code in enumerate(label_map.labels) if code not in trained])


def add_unseen_classes(
    reports: dict[str, dict[str, Any]],
    scores: dict[str, dict[str, Scores]],
    test: pl.DataFrame,
    label_map: LabelMap,
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
    comparator = nearest_class_scores(label_map.class_texts(), test[TEXT].to_list())
    labels = label_map.labels
    return {
        "classes": sorted(labels[i] for i in np.intersect1d(unseen, truth)),
        COMPARATOR: unseen_class_metrics(comparator, truth, unseen),
    }


def add_hierarchy(
    reports: dict[str, dict[str, Any]],
    scores: dict[str, dict[str, Scores]],
    label_map: LabelMap,
) -> None:
    """With a chart of parents: scores at each level of the chart and "right group, wrong
    account" (account_tax.evaluation.hierarchy)."""
    parents = label_map.hierarchy()
    if parents is None:
        return
    for name, view in scores.items():
        reports[name]["hierarchy"] = {
            split: hierarchy_metrics(s.y_true, s.calibrated, label_map.labels, parents)
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
    if not test.height:
        for path in (
            paths.confusion,
            paths.f1_support,
            paths.comparison,
            paths.reliability,
            paths.precision_coverage,
        ):
            plot_nothing(path, "No test rows (the test split is empty): nothing to plot.")
        return
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
