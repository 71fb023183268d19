"""Probabilities that mean what they say: temperature scaling and how well calibrated scores are.

One temperature T per model, fitted on the validation split by minimising the negative
log-likelihood of softmax(logits / T) (Guo et al., 2017). Dividing every logit by the same T never
changes which class ranks first, so accuracy and F1 stay as they are; only the confidence moves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

ECE_BINS = 15
# Temperatures are searched on a log scale in [1/20, 20]: far beyond what a trained model needs.
LOG_TEMPERATURE_BOUNDS = (-np.log(20.0), np.log(20.0))
# A probability is never taken as exactly 0 in a log-likelihood (sklearn's log_loss does the same).
EPSILON = 1e-15


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax(logits / temperature), float64."""
    return np.exp(log_softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=1))


def log_probabilities(probabilities: np.ndarray) -> np.ndarray:
    """Logits of a model that gives probabilities (softmax of them is the same probabilities)."""
    return np.log(np.clip(np.asarray(probabilities, dtype=np.float64), EPSILON, None))


def negative_log_likelihood(probabilities: np.ndarray, y_true: np.ndarray) -> float | None:
    """Mean -log p(true class); None on an empty set."""
    if not len(y_true):
        return None
    picked = probabilities[np.arange(len(y_true)), y_true]
    return float(-np.log(np.clip(picked, EPSILON, None)).mean())


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


def fit_temperature(logits: np.ndarray, y_true: np.ndarray) -> float:
    """The T > 0 that minimises the mean NLL of softmax(logits / T) on (logits, y_true).

    With no rows to fit on, T = 1 (the scores as they are).
    """
    logits = np.asarray(logits, dtype=np.float64)
    y_true = np.asarray(y_true, dtype=np.int64)
    if not len(y_true):
        return 1.0
    rows = np.arange(len(y_true))

    def nll(log_temperature: float) -> float:
        return float(-log_softmax(logits / np.exp(log_temperature), axis=1)[rows, y_true].mean())

    result = minimize_scalar(nll, bounds=LOG_TEMPERATURE_BOUNDS, method="bounded")
    return float(np.exp(result.x))
