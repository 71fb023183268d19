"""bench/backtest_next_month.py's interval over chains: the mean difference of several chains
scored on the same records, resampling chains and classes."""

import numpy as np
import pytest
from backtest_next_month import chain_difference

from account_tax.evaluation.bootstrap import ScoredRows, paired_bootstrap

CLASSES, ROWS_EACH = 40, 3


def predictions(truth: np.ndarray, right: float, seed: int) -> ScoredRows:
    """Right on about `right` of the rows, the others a random other class."""
    rng = np.random.default_rng(seed)
    wrong = rng.random(len(truth)) >= right
    predicted = np.where(wrong, (truth + rng.integers(1, CLASSES, len(truth))) % CLASSES, truth)
    return ScoredRows(
        predicted=predicted,
        top_k_hit=predicted == truth,
        confidence=np.full(len(truth), 0.5),
        threshold=None,
    )


@pytest.fixture
def truth() -> np.ndarray:
    return np.repeat(np.arange(CLASSES), ROWS_EACH)


def test_copies_of_one_chain_give_that_chains_paired_interval(truth):
    chain = {"warm": predictions(truth, 0.6, 1), "full": predictions(truth, 0.7, 2)}
    single = paired_bootstrap(truth, chain, CLASSES, resamples=500)
    expected = single["difference"]["warm"]["full"]["macro_f1"]
    assert single["unit"] == "classes"
    assert chain_difference(truth, [chain] * 3, CLASSES, resamples=500) == pytest.approx(expected)


def test_chains_that_disagree_widen_the_interval_around_their_mean(truth):
    full = predictions(truth, 0.7, 2)
    chains = [
        {"warm": predictions(truth, right, seed), "full": full}
        for right, seed in ((0.5, 3), (0.7, 4), (0.9, 5))
    ]
    each = [
        paired_bootstrap(truth, chain, CLASSES, resamples=500)["difference"]["warm"]["full"][
            "macro_f1"
        ]
        for chain in chains
    ]
    mean = chain_difference(truth, chains, CLASSES, resamples=500)
    assert mean["value"] == pytest.approx(np.mean([d["value"] for d in each]))
    # One chain's interval counts the records' chance only; the chains' spread comes on top.
    widest = max(d["high"] - d["low"] for d in each)
    assert mean["high"] - mean["low"] > widest
    assert mean["low"] < mean["value"] < mean["high"]
