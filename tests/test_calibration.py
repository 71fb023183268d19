import numpy as np
import pytest

from account_tax.evaluation.calibration import (
    brier_score,
    calibration_metrics,
    expected_calibration_error,
    reliability_bins,
)
from account_tax.training.temperature import fit_temperature, negative_log_likelihood, softmax


def overconfident_set(rows: int = 4000, classes: int = 10, seed: int = 0):
    """Logits whose softmax at T = 1 is right ~60 % of the time but claims ~99 %."""
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, classes, rows)
    logits = rng.normal(0, 1, (rows, classes))
    logits[np.arange(rows), y_true] += 1.5
    return logits * 6.0, y_true


def test_temperature_lowers_nll_and_keeps_the_argmax():
    logits, y_true = overconfident_set()
    temperature = fit_temperature(logits, y_true)
    assert temperature > 2  # an over-confident model is cooled down
    before, after = softmax(logits), softmax(logits, temperature)
    assert negative_log_likelihood(after, y_true) < negative_log_likelihood(before, y_true) - 0.5
    assert np.array_equal(before.argmax(axis=1), after.argmax(axis=1))
    metrics_before = calibration_metrics(before, y_true)
    metrics_after = calibration_metrics(after, y_true)
    assert metrics_after["ece"] < metrics_before["ece"] / 3
    assert metrics_after["brier"] < metrics_before["brier"]


def test_temperature_of_a_calibrated_model_is_near_one():
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 2, (20000, 5))
    probabilities = softmax(logits)
    # Labels drawn from the model's own probabilities: calibrated by construction.
    y_true = (probabilities.cumsum(axis=1) > rng.random((20000, 1))).argmax(axis=1)
    assert fit_temperature(logits, y_true) == pytest.approx(1.0, abs=0.05)
    assert calibration_metrics(probabilities, y_true)["ece"] < 0.02


def test_ece_of_a_perfectly_calibrated_synthetic_set_is_near_zero():
    rng = np.random.default_rng(2)
    confidence = rng.uniform(0.2, 1.0, 50000)
    correct = rng.random(50000) < confidence
    assert expected_calibration_error(confidence, correct) < 0.01
    # And far from zero when the model claims more than it delivers.
    assert expected_calibration_error(np.minimum(confidence + 0.2, 1), correct) > 0.15


def test_reliability_bins_have_equal_mass():
    confidence = np.linspace(0, 1, 150)
    bins = reliability_bins(confidence, confidence > 0.5)
    assert [b["rows"] for b in bins] == [10] * 15
    assert bins[0]["accuracy"] == 0 and bins[-1]["accuracy"] == 1


def test_brier_and_nll_by_hand():
    probabilities = np.array([[0.5, 0.5, 0.0], [0.1, 0.1, 0.8]])
    y_true = np.array([0, 2])
    # Row 1: 0.25 + 0.25 + 0; row 2: 0.01 + 0.01 + 0.04.
    assert brier_score(probabilities, y_true) == pytest.approx((0.5 + 0.06) / 2)
    assert negative_log_likelihood(probabilities, y_true) == pytest.approx(
        -(np.log(0.5) + np.log(0.8)) / 2
    )
    assert calibration_metrics(np.empty((0, 3)), np.empty(0, dtype=int)) == {
        "nll": None,
        "brier": None,
        "ece": None,
    }
