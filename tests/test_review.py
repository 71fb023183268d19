import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from account_tax.evaluation.review import (
    AUTO,
    REVIEW,
    auto_threshold,
    coverage,
    decision_reasons,
    decisions,
    highest_supported_target,
    precision_lower_bound,
    rows_needed,
)


def test_lowest_threshold_whose_rows_reach_the_target_with_confidence():
    # The 150 most confident rows all right, then one wrong, nine right and 40 wrong. At 0.98
    # and 0.95 the 150 are enough (149 would be) and the 160 with one error are not (their
    # bound is 0.971): the threshold is the 150th row's.
    confidence = np.linspace(1.0, 0.5, 200)
    correct = np.array([True] * 150 + [False] + [True] * 9 + [False] * 40)
    assert auto_threshold(confidence, correct, 0.98, 0.95) == confidence[149]
    # Asked for less certainty, or a lower target, more rows are posted.
    assert auto_threshold(confidence, correct, 0.98, 0.5) < confidence[149]
    assert auto_threshold(confidence, correct, 0.8, 0.95) < confidence[159]


def test_a_few_right_rows_do_not_make_a_threshold():
    confidence = np.array([0.99, 0.98, 0.97, 0.5, 0.4])
    correct = np.array([True, True, True, False, True])
    # Three right rows at the top are right 100 % of the time, but at 95 % confidence only
    # 37 % (0.05 ** (1/3)): no threshold at 0.98, while they clear 0.35 (and four of five
    # rows, at 34 %, do not).
    assert auto_threshold(confidence, correct, 0.98, 0.95) is None
    assert auto_threshold(confidence, correct, 0.35, 0.95) == 0.97
    assert list(decisions(confidence, None)) == [REVIEW] * 5


def test_a_float32_confidence_is_posted_as_a_float64_reader_compares_it():
    """0.7 as float32 is 0.69999999: below a threshold of 0.7, as polars or a spreadsheet reads
    the written confidence, although numpy compares it with 0.7 rounded to float32 (equal)."""
    confidence = np.array([0.7, 0.70000005], dtype=np.float32)
    assert list(decisions(confidence, 0.7)) == [REVIEW, AUTO]
    assert list(decisions(confidence, float(np.float32(0.7)))) == [AUTO, AUTO]


def test_each_decision_says_why():
    """The threshold posts what reaches it, a trusted ledger rule what it confirms below it, and
    nothing novel is posted, whatever posts it otherwise."""
    confidence = np.array([0.9, 0.9, 0.5, 0.5, 0.5, 0.9])
    confirmed = np.array([False, True, True, False, True, True])
    novel = np.array([False, False, False, False, True, True])
    reasons = decision_reasons(confidence, 0.8, novel, confirmed)
    assert list(reasons) == [
        "threshold",
        "threshold",
        "ledger_rule",
        "below_threshold",
        "novel",
        "novel",
    ]
    assert list(decisions(confidence, 0.8, novel, confirmed)) == [AUTO] * 3 + [REVIEW] * 3
    # Without a threshold only a rule posts.
    assert list(decision_reasons(confidence, None, novel, confirmed)) == [
        "no_threshold",
        "ledger_rule",
        "ledger_rule",
        "no_threshold",
        "novel",
        "novel",
    ]
    assert (
        list(decisions(confidence, None, novel, confirmed)) == [REVIEW] + [AUTO] * 2 + [REVIEW] * 3
    )


def test_rows_right_as_often_as_the_target_support_a_lower_one():
    # Newark's December: the most confident 200 right 196 times, the rest right 60 % of the
    # time. Rows right 98 % of the time cannot promise 98 %: the highest target they support is
    # the best lower bound over thresholds, and that target posts exactly there, not above it.
    rng = np.random.default_rng(0)
    confidence = np.linspace(1.0, 0.1, 1000)
    correct = np.concatenate([rng.permutation([True] * 196 + [False] * 4), rng.random(800) < 0.6])
    assert auto_threshold(confidence, correct, 0.98, 0.95) is None
    supported = highest_supported_target(confidence, correct, 0.95)
    target = supported["target_precision"]
    assert 0.9 < target < 0.98
    threshold = auto_threshold(confidence, correct, target, 0.95)
    assert threshold is not None and threshold <= supported["threshold"]
    assert auto_threshold(confidence, correct, target + 1e-9, 0.95) is None
    posted = confidence >= supported["threshold"]
    assert supported["coverage"] == posted.mean()
    assert target == pytest.approx(precision_lower_bound(correct[posted].sum(), posted.sum(), 0.95))
    assert highest_supported_target(np.array([]), np.array([], dtype=bool), 0.95) is None


def test_the_lower_bound_is_clopper_pearsons():
    # All right: the bound solves p ** n = 1 - level; none right: 0.
    assert precision_lower_bound(149, 149, 0.95) == pytest.approx(0.05 ** (1 / 149))
    assert precision_lower_bound(0, 10, 0.95) == 0.0
    # 149 rows all right clear 0.98 at 95 %, 148 do not; with one error 236 rows are needed.
    assert precision_lower_bound(149, 149, 0.95) >= 0.98 > precision_lower_bound(148, 148, 0.95)
    assert precision_lower_bound(235, 236, 0.95) >= 0.98 > precision_lower_bound(234, 235, 0.95)


@pytest.mark.parametrize(
    ("target", "level"), [(0.98, 0.95), (0.98, 0.5), (0.9, 0.99), (0.5, 0.75), (0.999, 0.95)]
)
def test_rows_needed_is_the_fewest_rows_all_right_that_make_a_threshold(target, level):
    needed = rows_needed(target, level)
    assert precision_lower_bound(needed, needed, level) >= target
    assert precision_lower_bound(needed - 1, needed - 1, level) < target
    # Those rows, all right, make a threshold; one row fewer does not.
    confidence = np.linspace(1.0, 0.5, needed)
    assert auto_threshold(confidence, np.ones(needed, bool), target, level) == 0.5
    assert auto_threshold(confidence[1:], np.ones(needed - 1, bool), target, level) is None


def test_a_target_of_one_is_never_shown_by_any_count():
    assert rows_needed(1.0, 0.95) is None
    assert auto_threshold(np.ones(10_000), np.ones(10_000, bool), 1.0, 0.95) is None


def test_equal_confidences_are_posted_together():
    confidence = np.array([0.9] * 10 + [0.5] * 30)
    correct = np.array([True] * 5 + [False] * 5 + [True] * 30)
    # 0.9 takes all ten rows at 0.9 (half right, bound 0.45 at a level of 0.5), never just the
    # five right ones first in line (bound 0.87); at 0.5, 35 of 40 bound at 0.86.
    assert auto_threshold(confidence, correct, 0.8, 0.5) == 0.5
    assert auto_threshold(confidence, correct, 0.9, 0.5) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1, allow_nan=False), st.booleans()), min_size=1, max_size=200),
    st.floats(0.5, 1.0),
    st.floats(0.5, 0.99),
)
def test_threshold_meets_the_target_on_the_rows_it_was_chosen_on(rows, target, level):
    confidence = np.array([c for c, _ in rows])
    correct = np.array([r for _, r in rows])

    def bound(t: float) -> float:
        posted = confidence >= t
        return precision_lower_bound(correct[posted].sum(), posted.sum(), level)

    threshold = auto_threshold(confidence, correct, target, level)
    if threshold is None:
        # No threshold: no set of top rows reaches the target with that confidence.
        assert all(bound(t) < target for t in np.unique(confidence))
        return
    result = coverage(confidence, correct, threshold)
    # The rows posted reach the target, even in the lower bound, and nothing lower does.
    assert result["precision"] >= bound(threshold) >= target
    assert all(bound(t) < target for t in np.unique(confidence[confidence < threshold]))


def test_coverage_with_amounts():
    confidence = np.array([0.99, 0.9, 0.4])
    correct = np.array([True, False, True])
    result = coverage(confidence, correct, 0.9, amounts=np.array([100.0, -300.0, 600.0]))
    assert result["coverage"] == pytest.approx(2 / 3)
    assert result["precision"] == pytest.approx(0.5)
    assert result["amount_coverage"] == pytest.approx(400 / 1000)
    assert result["amount_weighted_accuracy"] == pytest.approx(700 / 1000)
    assert list(decisions(confidence, 0.9)) == [AUTO, AUTO, REVIEW]
