import numpy as np
import pytest

from account_tax.evaluation.bootstrap import BETTER, TIE, WORSE, ScoredRows, judge, paired_bootstrap
from account_tax.evaluation.metrics import TOP_K_ACCURACY, classification_metrics


def rows_of(predicted, y_true, confidence=None, threshold=0.5):
    predicted = np.asarray(predicted)
    return ScoredRows(
        predicted=predicted,
        top_k_hit=predicted == y_true,
        confidence=np.ones(len(predicted)) if confidence is None else confidence,
        threshold=threshold,
    )


def test_point_values_equal_the_metrics_module():
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 6, 300)
    predicted = np.where(rng.random(300) < 0.7, y_true, rng.integers(0, 8, 300))
    result = paired_bootstrap(y_true, {"m": rows_of(predicted, y_true)}, 8, resamples=200)
    probabilities = np.eye(8)[predicted]
    expected = classification_metrics(y_true, probabilities, [str(i) for i in range(8)])
    intervals = result["models"]["m"]
    assert intervals["accuracy"]["value"] == pytest.approx(expected["accuracy"])
    assert intervals["macro_f1"]["value"] == pytest.approx(expected["macro_f1"])
    for metric in ("accuracy", "macro_f1", TOP_K_ACCURACY, "coverage"):
        assert intervals[metric]["low"] <= intervals[metric]["value"] <= intervals[metric]["high"]


def test_intervals_cover_the_true_accuracy_about_95_percent_of_the_time():
    rng = np.random.default_rng(42)
    true_accuracy, n, covered = 0.8, 300, 0
    simulations = 200
    for simulation in range(simulations):
        y_true = rng.integers(0, 5, n)
        correct = rng.random(n) < true_accuracy
        predicted = np.where(correct, y_true, (y_true + 1) % 5)
        result = paired_bootstrap(
            y_true, {"m": rows_of(predicted, y_true)}, 5, resamples=1000, seed=simulation
        )
        accuracy = result["models"]["m"]["accuracy"]
        covered += accuracy["low"] <= true_accuracy <= accuracy["high"]
    assert 0.90 <= covered / simulations <= 0.99


def test_paired_difference_of_a_model_with_itself_is_exactly_zero():
    rng = np.random.default_rng(3)
    y_true = rng.integers(0, 4, 200)
    predicted = np.where(rng.random(200) < 0.6, y_true, 0)
    rows = rows_of(predicted, y_true, rng.random(200))
    result = paired_bootstrap(y_true, {"a": rows, "b": rows}, 4, resamples=300)
    for interval in result["difference"]["a"]["b"].values():
        assert interval == {"value": 0.0, "low": 0.0, "high": 0.0}
    assert judge(result["difference"]["a"]["b"]["macro_f1"]) == TIE


def test_verdict_better_worse_and_tie():
    rng = np.random.default_rng(4)
    y_true = rng.integers(0, 5, 1000)
    good = np.where(rng.random(1000) < 0.9, y_true, (y_true + 1) % 5)
    bad = np.where(rng.random(1000) < 0.6, y_true, (y_true + 1) % 5)
    result = paired_bootstrap(
        y_true, {"good": rows_of(good, y_true), "bad": rows_of(bad, y_true)}, 5, resamples=500
    )
    assert judge(result["difference"]["good"]["bad"]["macro_f1"]) == BETTER
    assert judge(result["difference"]["bad"]["good"]["macro_f1"]) == WORSE
    forward = result["difference"]["good"]["bad"]["macro_f1"]
    backward = result["difference"]["bad"]["good"]["macro_f1"]
    assert forward["value"] == pytest.approx(-backward["value"])
    assert forward["low"] == pytest.approx(-backward["high"])


def test_same_seed_same_intervals():
    y_true = np.arange(100) % 4
    predicted = np.where(np.arange(100) % 3 == 0, 0, y_true)
    first = paired_bootstrap(y_true, {"m": rows_of(predicted, y_true)}, 4, seed=7, resamples=200)
    again = paired_bootstrap(y_true, {"m": rows_of(predicted, y_true)}, 4, seed=7, resamples=200)
    assert first["models"] == again["models"]


def test_coverage_counts_rows_at_or_above_the_threshold():
    y_true = np.zeros(4, dtype=int)
    rows = rows_of(np.zeros(4, dtype=int), y_true, np.array([0.9, 0.8, 0.3, 0.2]), 0.8)
    result = paired_bootstrap(y_true, {"m": rows}, 2, resamples=100)
    assert result["models"]["m"]["coverage"]["value"] == 0.5
    none = paired_bootstrap(y_true, {"m": rows_of([0] * 4, y_true, None, None)}, 2, resamples=100)
    assert none["models"]["m"]["coverage"]["high"] == 0.0
