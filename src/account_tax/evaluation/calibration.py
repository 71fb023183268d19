"""Probabilities that mean what they say: how well calibrated scores are (NLL, Brier score,
expected calibration error, reliability bins). The temperature that calibrates a model is
training's (account_tax.training.temperature)."""

from __future__ import annotations

from typing import Any

import numpy as np

from account_tax.training.temperature import negative_log_likelihood

ECE_BINS = 15


def brier_score(probabilities: np.ndarray, y_true: np.ndarray) -> float | None:
    """Mean over rows of the squared distance between the probability vector and the one-hot
    truth (the multi-class Brier score: 0 is perfect, 2 the worst)."""
    if not len(y_true):
        return None
    rows = np.arange(len(y_true))
    squares = (probabilities**2).sum(axis=1) - 2 * probabilities[rows, y_true] + 1
    return float(squares.mean())


def reliability_bins(
    confidence: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS
) -> list[dict[str, float]]:
    """Equal-mass bins of the top-1 confidence: each bin's mean confidence, accuracy and rows.

    Equal mass (each bin the same number of rows, as far as it divides) instead of equal width:
    a fine-tuned model puts most rows above 0.9, where equal-width bins would lump them together.
    """
    order = np.argsort(confidence, kind="stable")
    return [
        {
            "confidence": float(confidence[rows].mean()),
            "accuracy": float(correct[rows].mean()),
            "rows": len(rows),
        }
        for rows in np.array_split(order, min(bins, len(order)))
        if len(rows)
    ]


def expected_calibration_error(
    confidence: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS
) -> float | None:
    """Sum over equal-mass bins of |accuracy - mean confidence|, weighted by the bin's rows."""
    if not len(confidence):
        return None
    total = len(confidence)
    return float(
        sum(
            b["rows"] / total * abs(b["accuracy"] - b["confidence"])
            for b in reliability_bins(confidence, correct, bins)
        )
    )


def calibration_metrics(probabilities: np.ndarray, y_true: np.ndarray) -> dict[str, Any]:
    """NLL, Brier score and ECE (15 equal-mass bins) of one model on one split."""
    y_true = np.asarray(y_true, dtype=np.int64)
    confidence = probabilities.max(axis=1) if len(y_true) else np.empty(0)
    correct = probabilities.argmax(axis=1) == y_true if len(y_true) else np.empty(0, dtype=bool)
    return {
        "nll": negative_log_likelihood(probabilities, y_true),
        "brier": brier_score(probabilities, y_true),
        "ece": expected_calibration_error(confidence, correct),
    }
