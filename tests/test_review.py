import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from account_tax.evaluation.review import AUTO, REVIEW, auto_threshold, coverage, decisions


def test_lowest_threshold_that_meets_the_target():
    confidence = np.array([0.99, 0.95, 0.9, 0.8, 0.7, 0.6])
    correct = np.array([True, True, True, True, False, False])
    # At 0.8 the four rows above are all right; at 0.7 one in five is wrong.
    assert auto_threshold(confidence, correct, 1.0, min_rows=1) == 0.8
    assert auto_threshold(confidence, correct, 0.8, min_rows=1) == 0.7
    assert auto_threshold(confidence, correct, 0.5, min_rows=1) == 0.6


def test_a_threshold_backed_by_too_few_rows_does_not_count():
    confidence = np.array([0.99, 0.98, 0.97, 0.5, 0.4])
    correct = np.array([True, True, True, False, True])
    # Three right rows at the top: with min_rows 3 they count, with 4 they do not, and at four
    # rows or more the precision is below the target.
    assert auto_threshold(confidence, correct, 0.98, min_rows=3) == 0.97
    assert auto_threshold(confidence, correct, 0.98, min_rows=4) is None
    assert list(decisions(confidence, None)) == [REVIEW] * 5


def test_equal_confidences_are_posted_together():
    confidence = np.array([0.9, 0.9, 0.9, 0.5])
    correct = np.array([True, False, True, True])
    # 0.9 takes all three rows at 0.9 (precision 2/3), never just the first one (precision 1).
    assert auto_threshold(confidence, correct, 0.8, min_rows=1) is None
    assert auto_threshold(confidence, correct, 0.7, min_rows=1) == 0.5


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1, allow_nan=False), st.booleans()), min_size=1, max_size=200),
    st.floats(0.5, 1.0),
    st.integers(1, 30),
)
def test_threshold_meets_the_target_on_the_rows_it_was_chosen_on(rows, target, min_rows):
    confidence = np.array([c for c, _ in rows])
    correct = np.array([r for _, r in rows])
    threshold = auto_threshold(confidence, correct, target, min_rows)
    if threshold is None:
        # No threshold: no set of top rows of at least min_rows reaches the target.
        for t in np.unique(confidence):
            posted = confidence >= t
            assert posted.sum() < min_rows or correct[posted].mean() < target
        return
    result = coverage(confidence, correct, threshold)
    assert result["precision"] >= target
    assert result["auto_rows"] >= min_rows
    # And it is the lowest such threshold.
    for t in np.unique(confidence[confidence < threshold]):
        posted = confidence >= t
        assert posted.sum() < min_rows or correct[posted].mean() < target


def test_coverage_with_amounts():
    confidence = np.array([0.99, 0.9, 0.4])
    correct = np.array([True, False, True])
    result = coverage(confidence, correct, 0.9, amounts=np.array([100.0, -300.0, 600.0]))
    assert result["coverage"] == pytest.approx(2 / 3)
    assert result["precision"] == pytest.approx(0.5)
    assert result["amount_coverage"] == pytest.approx(400 / 1000)
    assert result["amount_weighted_accuracy"] == pytest.approx(700 / 1000)
    assert list(decisions(confidence, 0.9)) == [AUTO, AUTO, REVIEW]
