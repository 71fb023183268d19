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


class ManyRareClasses:
    """1,000 accounts with one to three test rows each, as a test split of a large chart of
    accounts is. Rarer accounts are harder (their chance of a correct prediction is drawn from a
    Beta whose mean grows with the rows), and a wrong prediction goes to one of three
    neighbouring accounts, as confusions concentrate in practice."""

    classes = 1000

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        self.rows = rng.integers(1, 4, self.classes)
        self.skill = rng.beta(1 + 1.5 * self.rows, 2)
        self.y_true = np.repeat(np.arange(self.classes), self.rows)

    def predict(self, rng: np.random.Generator) -> np.ndarray:
        correct = rng.random(len(self.y_true)) < self.skill[self.y_true]
        neighbour = (self.y_true + rng.integers(1, 4, len(self.y_true))) % self.classes
        return np.where(correct, self.y_true, neighbour)

    def macro_f1(self, predicted: np.ndarray) -> float:
        return paired_bootstrap(
            self.y_true, {"m": rows_of(predicted, self.y_true)}, self.classes, resamples=1
        )["models"]["m"]["macro_f1"]["value"]


def coverage(ledger: ManyRareClasses, unit: str, repetitions: int, resamples: int):
    """Share of repetitions (a new test set each) whose 95 % interval of macro-F1 covers the
    expected macro-F1 of test sets drawn this way, and share that contain their own estimate."""
    rng = np.random.default_rng(1)
    truth = np.mean([ledger.macro_f1(ledger.predict(rng)) for _ in range(2000)])
    covered = contains_own = 0
    for repetition in range(repetitions):
        rows = rows_of(ledger.predict(rng), ledger.y_true)
        result = paired_bootstrap(
            ledger.y_true,
            {"m": rows},
            ledger.classes,
            resamples=resamples,
            seed=repetition,
            unit=unit,
        )
        interval = result["models"]["m"]["macro_f1"]
        covered += interval["low"] <= truth <= interval["high"]
        contains_own += interval["low"] <= interval["value"] <= interval["high"]
    return covered / repetitions, contains_own / repetitions


def test_many_classes_with_one_to_three_rows_get_honest_intervals():
    ledger = ManyRareClasses(seed=0)
    covered, contains_own = coverage(ledger, "classes", repetitions=200, resamples=1000)
    assert covered >= 0.90
    assert contains_own == 1.0
    # What it replaces: resampling rows drops the rare (and weaker) classes from resamples.
    rows_covered, _ = coverage(ledger, "rows", repetitions=60, resamples=400)
    assert rows_covered < 0.90


def test_classes_are_resampled_where_the_test_set_has_many_and_rows_where_few():
    rng = np.random.default_rng(5)
    many = np.repeat(np.arange(40), 2)
    few = rng.integers(0, 5, 200)
    for y_true, unit in ((many, "classes"), (few, "rows")):
        predicted = np.where(rng.random(len(y_true)) < 0.7, y_true, 0)
        result = paired_bootstrap(y_true, {"m": rows_of(predicted, y_true)}, 40, resamples=50)
        assert result["unit"] == unit


def test_class_resamples_give_the_same_point_values_and_a_paired_difference():
    ledger = ManyRareClasses(seed=3)
    rng = np.random.default_rng(2)
    better, worse = ledger.predict(rng), np.roll(ledger.predict(rng), 1)
    models = {"a": rows_of(better, ledger.y_true), "b": rows_of(worse, ledger.y_true)}
    by_classes = paired_bootstrap(ledger.y_true, models, ledger.classes, resamples=300)
    by_rows = paired_bootstrap(ledger.y_true, models, ledger.classes, resamples=1, unit="rows")
    assert by_classes["unit"] == "classes"
    for metric in ("accuracy", "macro_f1", TOP_K_ACCURACY, "coverage"):
        assert by_classes["models"]["a"][metric]["value"] == pytest.approx(
            by_rows["models"]["a"][metric]["value"]
        )
    assert judge(by_classes["difference"]["a"]["b"]["macro_f1"]) == BETTER
