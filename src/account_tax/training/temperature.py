"""Temperature scaling: one temperature T per model, fitted on the validation split by
minimising the negative log-likelihood of softmax(logits / T) (Guo et al., 2017). Dividing every
logit by the same T never changes which class ranks first, so accuracy and F1 stay as they are;
only the confidence moves. Training fits it when it exports a model; evaluation and prediction
apply it.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

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
