"""Evaluation of the fine-tuned model and the baseline, scored by the same code on the same splits.

For each model: its logits on validation and test, the temperature fitted on validation (stored
with the fine-tuned model by training, in the baseline's metrics by the baseline stage), the
classification metrics of the calibrated probabilities, calibration before and after (NLL,
Brier, ECE), and the auto-post threshold chosen on validation with what it does on test. Then a
paired bootstrap of the test set gives intervals, and the verdict (better, no significant
difference, worse) is read from the interval of the difference in the deciding metric.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from account_tax.evaluation.bootstrap import BETTER, TIE, WORSE, ScoredRows, judge, paired_bootstrap
from account_tax.evaluation.calibration import calibration_metrics, reliability_bins
from account_tax.evaluation.ledger_rules import RuleSettings
from account_tax.evaluation.metrics import TOP_K, TOP_K_ACCURACY, classification_metrics, top_k
from account_tax.evaluation.review import (
    TrackRecord,
    auto_threshold,
    coverage,
    highest_supported_target,
    precision_coverage_curve,
    rows_needed,
)
from account_tax.evaluation.unseen_classes import COMPARATOR
from account_tax.settings import SectionView
from account_tax.training.temperature import EPSILON, fit_temperature, log_probabilities, softmax

log = logging.getLogger(__name__)

MODEL, BASELINE, ENSEMBLE = "fine-tuned", "baseline", "ensemble"
# In this order a tie on validation goes to the earlier candidate.
CANDIDATES = (MODEL, ENSEMBLE, BASELINE)
MIX_WEIGHTS = np.linspace(0.0, 1.0, 101)
SPLITS = ("validation", "test")
HEADLINE = ("accuracy", "macro_f1", "weighted_f1", TOP_K_ACCURACY)
DECIDING_METRIC = "macro_f1"


@dataclass(frozen=True)
class ReviewSettings(SectionView):
    SECTION = "review"
    target_precision: float
    confidence_level: float
    novelty_quantile: float
    rules: RuleSettings


@dataclass(frozen=True)
class Scores:
    """One model's view of one split: its logits and temperature, and the truth."""

    logits: np.ndarray
    temperature: float
    y_true: np.ndarray
    novel: np.ndarray | None = None
    """Rows unlike any training record (see `evidence.novelty_threshold`): never posted."""
    postable: np.ndarray | None = None
    """Per class, whether it takes postings; the others get probability 0 (`postable_only`)."""

    # Computed once: metrics, thresholds, the bootstrap and the plots all read them.
    @cached_property
    def raw(self) -> np.ndarray:
        return postable_only(softmax(self.logits), self.postable)

    @cached_property
    def calibrated(self) -> np.ndarray:
        return postable_only(softmax(self.logits, self.temperature), self.postable)

    def confidence_and_correct(self) -> tuple[np.ndarray, np.ndarray]:
        probabilities = self.calibrated
        return probabilities.max(axis=1), probabilities.argmax(axis=1) == self.y_true

    def non_novel_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """`confidence_and_correct` of the rows that may be posted, the novel ones left out: the
        rows whose precision an auto-post threshold answers for."""
        confidence, correct = self.confidence_and_correct()
        if self.novel is None:
            return confidence, correct
        return confidence[~self.novel], correct[~self.novel]


def postable_only(probabilities: np.ndarray, postable: np.ndarray | None) -> np.ndarray:
    """The probabilities with the accounts that take no postings (a chart's groups) at 0 and
    each row renormalised: they are never predicted, posted or listed. Applied after the
    temperature, which is fitted on every class."""
    if postable is None or postable.all():
        return probabilities
    kept = np.where(postable, probabilities, 0.0)
    return kept / np.clip(kept.sum(axis=1, keepdims=True), EPSILON, None)


def fit_mix_weight(model: Scores, baseline: Scores) -> float:
    """The weight w of the model in w·p_model + (1 - w)·p_baseline (both calibrated) that
    minimises the NLL on `model`'s split, on a grid of 0.01; 1 (the model) without rows."""
    rows = np.arange(len(model.y_true))
    if not len(rows):
        return 1.0
    right_model = model.calibrated[rows, model.y_true]
    right_baseline = baseline.calibrated[rows, baseline.y_true]
    mixed = MIX_WEIGHTS[:, None] * right_model + (1 - MIX_WEIGHTS[:, None]) * right_baseline
    nll = -np.log(np.clip(mixed, EPSILON, None)).mean(axis=1)
    return float(MIX_WEIGHTS[nll.argmin()])


def ensemble_logits(model: np.ndarray, baseline: np.ndarray, weight: float) -> np.ndarray:
    """Logits of the convex mix of two calibrated probability matrices."""
    return log_probabilities(weight * model + (1 - weight) * baseline)


def ensemble_scores(
    model: dict[str, Scores], baseline: dict[str, Scores]
) -> tuple[dict[str, Scores], float]:
    """The third candidate: the model and the baseline mixed with the weight fitted on
    validation, and the mix calibrated there too, like each of them."""
    weight = fit_mix_weight(model["validation"], baseline["validation"])
    logits = {
        split: ensemble_logits(model[split].calibrated, baseline[split].calibrated, weight)
        for split in model
    }
    temperature = fit_temperature(logits["validation"], model["validation"].y_true)
    return {
        split: Scores(values, temperature, model[split].y_true, postable=model[split].postable)
        for split, values in logits.items()
    }, weight


def choose_candidate(
    reports: dict[str, dict[str, Any]],
    validation_scores: dict[str, Scores],
    num_labels: int,
    *,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """The candidate `predict` uses. The baseline, unless another candidate is better than it on
    validation by the deciding metric with 95 % confidence (a paired bootstrap of the validation
    split); of those, the best on validation (a tie to the earlier in CANDIDATES).

    A lead within the noise of the validation split is no reason to ship: on a time split of the
    synthetic ledger the mix led the baseline by 0.0003 on validation and was 0.04 behind on
    test. With an empty validation split nothing can be shown, and the baseline ships.
    """
    scores = {name: reports[name]["validation"][DECIDING_METRIC] for name in CANDIDATES}
    choice: dict[str, Any] = {f"validation_{DECIDING_METRIC}": scores}
    y_true = validation_scores[BASELINE].y_true
    if not len(y_true):
        return choice | {
            "candidate": BASELINE,
            "why": "the validation split is empty: no candidate can be shown to beat the baseline",
        }
    bootstrap = paired_bootstrap(
        y_true,
        {name: scored_rows(view, None) for name, view in validation_scores.items()},
        num_labels,
        resamples=resamples,
        seed=seed,
    )
    leads = {
        name: bootstrap["difference"][name][BASELINE][DECIDING_METRIC]
        for name in CANDIDATES
        if name != BASELINE
    }
    choice["validation_difference_from_baseline"] = leads
    better = [name for name in CANDIDATES if name in leads and judge(leads[name]) == BETTER]
    ranking = ", ".join(f"{name} {scores[name]:.3f}" for name in CANDIDATES)
    if not better:
        return choice | {
            "candidate": BASELINE,
            "why": f"no candidate is significantly better than the baseline on validation "
            f"{DECIDING_METRIC} ({ranking})",
        }
    chosen = max(better, key=lambda name: scores[name])
    lead = leads[chosen]
    return choice | {
        "candidate": chosen,
        "why": f"best validation {DECIDING_METRIC} ({ranking}), ahead of the baseline by "
        f"{lead['value']:+.3f} [{lead['low']:+.3f}, {lead['high']:+.3f}]",
    }


def assess(
    scores: dict[str, Scores],
    labels: list[str],
    review: ReviewSettings,
    amounts: np.ndarray | None = None,
    track_record: TrackRecord | None = None,
) -> dict[str, Any]:
    """One model's report: metrics and calibration per split, and the auto-post threshold chosen
    on the validation rows and track record that may be posted (novel rows never are) with its
    coverage and precision on each (amounts: the test rows'), and on test without the novelty
    rule too."""
    track_record = track_record or TrackRecord.read(None)
    report: dict[str, Any] = {"temperature": scores["test"].temperature}
    for split, view in scores.items():
        report[split] = classification_metrics(view.y_true, view.calibrated, labels)
        report[split]["calibration"] = {
            "before": calibration_metrics(view.raw, view.y_true),
            "after": calibration_metrics(view.calibrated, view.y_true),
        }
    weighed = track_record.with_validation(*scores["validation"].non_novel_rows())
    threshold = auto_threshold(*weighed, review.target_precision, review.confidence_level)
    report["review"] = {
        "target_precision": review.target_precision,
        "confidence_level": review.confidence_level,
        "rows_needed": rows_needed(review.target_precision, review.confidence_level),
        "threshold": threshold,
        "highest_supported_target": highest_supported_target(*weighed, review.confidence_level),
        **{
            split: coverage(
                *scores[split].confidence_and_correct(),
                threshold,
                amounts if split == "test" else None,
                scores[split].novel,
            )
            for split in SPLITS
        },
        "track_record": coverage(track_record.confidence, track_record.right, threshold),
        # What the novelty rule costs and saves: the same threshold, novel rows posted too.
        "test_without_novelty": coverage(*scores["test"].confidence_and_correct(), threshold),
    }
    return report


def slice_metrics(view: Scores, rows: np.ndarray, labels: list[str]) -> dict[str, Any]:
    """The headline metrics of one model on the `rows` (a boolean mask) of a split."""
    metrics = classification_metrics(view.y_true[rows], view.calibrated[rows], labels)
    return {"rows": int(rows.sum()), **{metric: metrics[metric] for metric in HEADLINE}}


def scored_rows(view: Scores, threshold: float | None) -> ScoredRows:
    ranked, _ = top_k(view.calibrated, TOP_K)
    confidence, _ = view.confidence_and_correct()
    return ScoredRows(
        predicted=ranked[:, 0],
        top_k_hit=(ranked == view.y_true[:, None]).any(axis=1),
        confidence=confidence,
        threshold=threshold,
        novel=view.novel,
    )


def compare(
    reports: dict[str, dict[str, Any]],
    scores: dict[str, dict[str, Scores]],
    num_labels: int,
    *,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """Headline scores side by side, the bootstrap intervals, the verdict on test (the
    fine-tuned model against the baseline), and the candidate that ships with its own verdict
    against the baseline."""
    shipped = choose_candidate(
        reports,
        {name: view["validation"] for name, view in scores.items()},
        num_labels,
        resamples=resamples,
        seed=seed,
    )
    test_scores = {name: view["test"] for name, view in scores.items()}
    table = {
        split: {
            metric: {name: report[split][metric] for name, report in reports.items()}
            for metric in HEADLINE
        }
        for split in SPLITS
    }
    y_true = test_scores[MODEL].y_true
    if not len(y_true):
        return {
            "table": table,
            "deciding_metric": f"test {DECIDING_METRIC}",
            "verdict": None,
            "shipped": shipped,
        }
    bootstrap = paired_bootstrap(
        y_true,
        {
            name: scored_rows(view, reports[name]["review"]["threshold"])
            for name, view in test_scores.items()
        },
        num_labels,
        resamples=resamples,
        seed=seed,
    )
    difference = bootstrap["difference"][MODEL][BASELINE][DECIDING_METRIC]
    log.info("bootstrap: %d resamples in %.2f s", resamples, bootstrap["seconds"])
    if shipped["candidate"] != BASELINE:
        against = bootstrap["difference"][shipped["candidate"]][BASELINE][DECIDING_METRIC]
        shipped |= {"difference_from_baseline": against, "verdict": judge(against)}
    return {
        "table": table,
        "deciding_metric": f"test {DECIDING_METRIC}",
        "bootstrap": bootstrap,
        "verdict": judge(difference),
        "difference": difference,
        "model_beats_baseline": judge(difference) == BETTER,
        "shipped": shipped,
    }


def resampled(bootstrap: dict[str, Any]) -> str:
    """What the paired resamples drew, in words."""
    what = (
        f"the {bootstrap['classes']} classes of {bootstrap['rows']} test rows"
        if bootstrap["unit"] == "classes"
        else f"{bootstrap['rows']} test rows"
    )
    return f"{bootstrap['resamples']} paired resamples of {what}"


def verdict_text(comparison: dict[str, Any]) -> str:
    if comparison["verdict"] is None:
        return "No verdict: the test split is empty, so test macro-F1 is undefined."
    intervals = comparison["bootstrap"]["models"]
    model, baseline = intervals[MODEL][DECIDING_METRIC], intervals[BASELINE][DECIDING_METRIC]
    difference = comparison["difference"]
    scores = (
        f"test macro-F1 {model['value']:.3f} [{model['low']:.3f}, {model['high']:.3f}] against "
        f"{baseline['value']:.3f} [{baseline['low']:.3f}, {baseline['high']:.3f}]; difference "
        f"{difference['value']:+.3f}, 95 % interval [{difference['low']:+.3f}, "
        f"{difference['high']:+.3f}] ({resampled(comparison['bootstrap'])})"
    )
    if comparison["verdict"] == BETTER:
        text = f"The fine-tuned model is better than the TF-IDF baseline: {scores}."
    elif comparison["verdict"] == WORSE:
        text = f"The fine-tuned model is WORSE than the TF-IDF baseline: {scores}."
    else:
        assert comparison["verdict"] == TIE
        text = (
            f"No significant difference between the fine-tuned model and the TF-IDF baseline: "
            f"{scores}. The test set cannot tell them apart."
        )
    return f"{text} {shipped_text(comparison)}"


def shipped_text(comparison: dict[str, Any]) -> str:
    shipped = comparison["shipped"]
    text = f"Predictions use the {shipped['candidate']} candidate: {shipped['why']}."
    if shipped.get("verdict") is not None and shipped["candidate"] != MODEL:
        difference = shipped["difference_from_baseline"]
        text += (
            f" Against the baseline on test it is {shipped['verdict']} (macro-F1 difference "
            f"{difference['value']:+.3f}, 95 % interval [{difference['low']:+.3f}, "
            f"{difference['high']:+.3f}])."
        )
    return text


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def summary_html(
    comparison: dict[str, Any],
    reports: dict[str, dict[str, Any]],
    run_id: str | None,
    unseen_classes: dict[str, Any] | None = None,
    examples: str = "",
) -> str:
    """A small standalone page for the report: the verdict, the headline table with intervals,
    calibration, the auto-post coverage of each model with and without the novelty rule, and
    `examples` (HTML: reviewed rows with their evidence) below."""
    names = list(reports)
    header = "".join(f"<th>{html.escape(name)}</th>" for name in names)
    bootstrap = comparison.get("bootstrap")
    intervals = bootstrap["models"] if bootstrap else {}
    rows = []
    for split, metrics in comparison["table"].items():
        for metric, scores in metrics.items():
            cells = []
            for name in names:
                cell = _number(scores[name])
                interval = intervals.get(name, {}).get(metric) if split == "test" else None
                if interval is not None:
                    cell += f" [{interval['low']:.3f}, {interval['high']:.3f}]"
                cells.append(f"<td>{cell}</td>")
            rows.append(f"<tr><td>{split}</td><td>{metric}</td>{''.join(cells)}</tr>")
    for measure in ("nll", "brier", "ece"):
        for stage in ("before", "after"):
            cells = "".join(
                f"<td>{_number(reports[name]['test']['calibration'][stage][measure])}</td>"
                for name in names
            )
            rows.append(f"<tr><td>test</td><td>{measure} ({stage} calibration)</td>{cells}</tr>")
    unseen = reports[names[0]]["test"].get("unseen_groups")
    if unseen is not None:
        for metric in HEADLINE:
            cells = "".join(
                f"<td>{_number(reports[name]['test']['unseen_groups'][metric])}</td>"
                for name in names
            )
            what = f"{metric}, {unseen['rows']} rows whose {unseen['column']} is not in train"
            rows.append(f"<tr><td>test</td><td>{html.escape(what)}</td>{cells}</tr>")
    if unseen_classes is not None:
        comparator = unseen_classes[COMPARATOR]
        for metric in ("top1", "top3", "macro_recall"):
            cells = "".join(
                f"<td>{_number(reports[name]['test']['unseen_classes'][metric])}</td>"
                for name in names
            )
            what = (
                f"{metric}, {comparator['rows']} rows of {comparator['classes']} classes with no "
                f"training rows (nearest class by TF-IDF: {_number(comparator[metric])})"
            )
            rows.append(f"<tr><td>test</td><td>{html.escape(what)}</td>{cells}</tr>")
        cells = "".join(
            f"<td>{_number(reports[name]['test']['unseen_classes']['seen_classes_macro_f1'])}</td>"
            for name in names
        )
        rows.append(
            f"<tr><td>test</td><td>macro_f1 of the classes seen in training</td>{cells}</tr>"
        )
    target = reports[names[0]]["review"]["target_precision"]
    cells = "".join(f"<td>{_number(reports[name]['review']['threshold'])}</td>" for name in names)
    rows.append(f"<tr><td>validation</td><td>auto-post threshold</td>{cells}</tr>")
    supported = [reports[name]["review"]["highest_supported_target"] for name in names]
    cells = "".join(
        f"<td>{_number(best['target_precision'])}, posting {_number(best['coverage'])}</td>"
        if best
        else "<td>n/a</td>"
        for best in supported
    )
    level = reports[names[0]]["review"]["confidence_level"]
    rows.append(
        f"<tr><td>validation</td><td>highest target these rows support (confidence {level})"
        f"</td>{cells}</tr>"
    )
    record = reports[names[0]]["review"]["track_record"]
    if record["rows"]:
        cells = "".join(
            f"<td>{reports[name]['review']['track_record']['auto_rows']} posted, precision "
            f"{_number(reports[name]['review']['track_record']['precision'])}</td>"
            for name in names
        )
        rows.append(
            f"<tr><td>track record</td><td>{record['rows']} reviewed suggestions, weighed with "
            f"validation: at the threshold</td>{cells}</tr>"
        )
    for key in ("coverage", "precision"):
        cells = "".join(
            f"<td>{_number(reports[name]['review']['test'][key])}</td>" for name in names
        )
        rows.append(f"<tr><td>test</td><td>auto-post {key} (target {target})</td>{cells}</tr>")
        cells = "".join(
            f"<td>{_number(reports[name]['review']['test_without_novelty'][key])}</td>"
            for name in names
        )
        rows.append(f"<tr><td>test</td><td>auto-post {key}, novel rows posted too</td>{cells}</tr>")
    cells = "".join(
        f"<td>{reports[name]['novelty']['test_novel_rows']} "
        f"(accuracy {_number(reports[name]['novelty']['test_novel_accuracy'])})</td>"
        for name in names
    )
    rows.append(f"<tr><td>test</td><td>novel rows, never posted</td>{cells}</tr>")
    cells = "".join(
        f"<td>{_number(reports[name]['novelty']['test_nearest_agrees'])}</td>" for name in names
    )
    rows.append(
        f"<tr><td>test</td><td>nearest training record has the suggested account</td>{cells}</tr>"
    )
    run = f"<p>MLflow run: <code>{html.escape(run_id)}</code></p>" if run_id else ""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Evaluation</title></head><body>"
        f"<p><strong>{html.escape(verdict_text(comparison))}</strong></p>{run}"
        + (
            f"<p>Test intervals: 95 % percentile bootstrap, "
            f"{html.escape(resampled(bootstrap))}.</p>"
            if bootstrap
            else ""
        )
        + f"<table border='1' cellpadding='4'><tr><th>split</th><th>metric</th>{header}</tr>"
        + "".join(rows)
        + f"</table>{examples}</body></html>\n"
    )


def curves(scores: dict[str, Scores]) -> dict[str, dict[str, Any]]:
    """Per model, the test split's reliability bins and precision-coverage curve, for plots."""
    result = {}
    for name, view in scores.items():
        confidence, correct = view.confidence_and_correct()
        raw = view.raw
        _, _, precision, share = precision_coverage_curve(confidence, correct)
        result[name] = {
            "reliability": reliability_bins(confidence, correct),
            "reliability_before": reliability_bins(
                raw.max(axis=1), raw.argmax(axis=1) == view.y_true
            ),
            "coverage": share,
            "precision": precision,
        }
    return result


def unseen_class_scores(prefix: str, scores: dict[str, Any]) -> dict[str, float]:
    """`<prefix>_unseen_classes_<metric>` for the scores of classes with no training rows (the
    row and class counts left out)."""
    return {
        f"{prefix}_unseen_classes_{metric}": value
        for metric, value in scores.items()
        if metric not in ("rows", "classes") and value is not None
    }


def tracked_metrics(
    reports: dict[str, dict[str, Any]],
    comparison: dict[str, Any],
    unseen_classes: dict[str, Any] | None = None,
) -> dict[str, float]:
    """The numbers evaluate logs to MLflow, flat: `<candidate>_<split>_<metric>` (no prefix for
    the fine-tuned model), calibration, the hierarchy's test levels, the auto-post coverage, and
    the verdict's difference with its interval."""
    metrics: dict[str, float] = {}
    for name, report in reports.items():
        prefix = "" if name == MODEL else f"{name}_"
        for split in SPLITS:
            metrics |= {
                f"{prefix}{split}_{metric}": report[split][metric]
                for metric in HEADLINE
                if report[split][metric] is not None
            }
            metrics |= unseen_class_scores(
                f"{prefix}{split}", report[split].get("unseen_classes", {})
            )
            unseen_groups = report[split].get("unseen_groups", {})
            metrics |= {
                f"{prefix}{split}_unseen_groups_{metric}": unseen_groups[metric]
                for metric in HEADLINE
                if unseen_groups.get(metric) is not None
            }
            for stage, values in report[split]["calibration"].items():
                metrics |= {
                    f"{prefix}{split}_{measure}_{stage}_calibration": value
                    for measure, value in values.items()
                    if value is not None
                }
        metrics[f"{prefix}temperature"] = report["temperature"]
        hierarchy = report.get("hierarchy", {}).get("test")
        if hierarchy is not None:
            for level in hierarchy["levels"]:
                for metric in ("accuracy", "macro_f1"):
                    if level[metric] is not None:
                        metrics[f"{prefix}test_level_{level['level']}_{metric}"] = level[metric]
            if hierarchy["right_parent_share"] is not None:
                metrics[f"{prefix}test_right_parent_share"] = hierarchy["right_parent_share"]
        for key in ("coverage", "precision", "amount_coverage", "amount_weighted_accuracy"):
            value = report["review"]["test"].get(key)
            if value is not None:
                metrics[f"{prefix}test_auto_{key}"] = value
        for key in ("coverage", "precision"):
            value = report["review"]["test_without_novelty"][key]
            if value is not None:
                metrics[f"{prefix}test_auto_{key}_without_novelty"] = value
        for key in ("test_novel_rows", "test_novel_accuracy", "test_nearest_agrees"):
            if report["novelty"][key] is not None:
                metrics[f"{prefix}{key}"] = report["novelty"][key]
    if unseen_classes is not None:
        metrics |= unseen_class_scores(f"{COMPARATOR}_test", unseen_classes[COMPARATOR])
    metrics["ensemble_weight"] = reports[ENSEMBLE]["weight"]
    if comparison["verdict"] is not None:
        difference = comparison["difference"]
        metrics |= {
            "beats_baseline": float(comparison["model_beats_baseline"]),
            "macro_f1_difference": difference["value"],
            "macro_f1_difference_low": difference["low"],
            "macro_f1_difference_high": difference["high"],
            "bootstrap_seconds": comparison["bootstrap"]["seconds"],
        }
    return metrics
