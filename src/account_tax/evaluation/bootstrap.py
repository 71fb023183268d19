"""Error bars for the test scores: a seeded, vectorised, paired bootstrap of the test set.

Each resample draws the test rows with replacement; every model is scored on the same resamples,
so the difference between two models is measured on the same rows each time (a paired bootstrap:
far tighter than comparing two separate intervals). The interval is the percentile interval.
Resamples are processed in chunks of a few million row draws, so memory stays flat while 1,000
resamples of 100,000 rows take seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from account_tax.evaluation.metrics import TOP_K_ACCURACY

METRICS = ("accuracy", "macro_f1", TOP_K_ACCURACY, "coverage")
# Row draws per chunk: bounds the index matrix and the per-class count tables.
DRAWS_PER_CHUNK = 2_000_000
BETTER, TIE, WORSE = "better", "no significant difference", "worse"


@dataclass(frozen=True)
class ScoredRows:
    """One model's test predictions, row for row in the order of the true labels."""

    predicted: np.ndarray
    top_k_hit: np.ndarray
    confidence: np.ndarray
    threshold: float | None


def _scores(
    draws: np.ndarray, y_true: np.ndarray, rows: ScoredRows, num_labels: int
) -> dict[str, np.ndarray]:
    """The metrics of each resample (a row of `draws`, the indices drawn)."""
    resamples = len(draws)
    truth, predicted = y_true[draws], rows.predicted[draws]
    correct = truth == predicted
    offset = (np.arange(resamples) * num_labels)[:, None]

    def per_class(ids: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        flat = np.bincount(
            (ids + offset).ravel(),
            weights=None if weights is None else weights.ravel(),
            minlength=resamples * num_labels,
        )
        return flat.reshape(resamples, num_labels)

    support, predicted_count = per_class(truth), per_class(predicted)
    true_positive = per_class(truth, correct.astype(np.float64))
    present = support > 0
    # As in `classification_metrics`: the mean F1 over the classes present in the (re)sample.
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(present, 2 * true_positive / (support + predicted_count), 0.0)
    posted = (
        np.zeros_like(correct)
        if rows.threshold is None
        else rows.confidence[draws] >= rows.threshold
    )
    return {
        "accuracy": correct.mean(axis=1),
        "macro_f1": f1.sum(axis=1) / present.sum(axis=1),
        TOP_K_ACCURACY: rows.top_k_hit[draws].mean(axis=1),
        "coverage": posted.mean(axis=1),
    }


def _interval(values: np.ndarray, point: float, level: float) -> dict[str, float]:
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return {"value": float(point), "low": float(low), "high": float(high)}


def judge(difference: dict[str, float]) -> str:
    """`better` / `worse` when the interval of (model - other) lies above / below 0."""
    if difference["low"] > 0:
        return BETTER
    if difference["high"] < 0:
        return WORSE
    return TIE


def paired_bootstrap(
    y_true: np.ndarray,
    models: dict[str, ScoredRows],
    num_labels: int,
    *,
    resamples: int = 1000,
    seed: int = 13,
    level: float = 0.95,
) -> dict[str, Any]:
    """Intervals of each model's metrics, and of the difference of every two models:
    `difference[a][b][metric]` is the interval of (a - b) on the same resamples."""
    started = time.perf_counter()
    y_true = np.asarray(y_true, dtype=np.int64)
    n = len(y_true)
    if n == 0:
        raise ValueError("the bootstrap needs at least one test row")
    everything = np.arange(n)[None, :]
    points = {name: _scores(everything, y_true, rows, num_labels) for name, rows in models.items()}
    rng = np.random.default_rng(seed)
    chunk = max(1, DRAWS_PER_CHUNK // n)
    samples: dict[str, dict[str, list[np.ndarray]]] = {
        name: {metric: [] for metric in METRICS} for name in models
    }
    for start in range(0, resamples, chunk):
        draws = rng.integers(0, n, size=(min(chunk, resamples - start), n))
        for name, rows in models.items():
            for metric, values in _scores(draws, y_true, rows, num_labels).items():
                samples[name][metric].append(values)
    stacked = {
        name: {metric: np.concatenate(parts) for metric, parts in by_metric.items()}
        for name, by_metric in samples.items()
    }
    return {
        "resamples": resamples,
        "seed": seed,
        "level": level,
        "rows": n,
        "models": {
            name: {
                metric: _interval(stacked[name][metric], points[name][metric][0], level)
                for metric in METRICS
            }
            for name in models
        },
        "difference": {
            name: {
                other: {
                    metric: _interval(
                        stacked[name][metric] - stacked[other][metric],
                        points[name][metric][0] - points[other][metric][0],
                        level,
                    )
                    for metric in METRICS
                }
                for other in models
                if other != name
            }
            for name in models
        },
        "seconds": time.perf_counter() - started,
    }
