"""Auto-post or review: the confidence threshold above which a suggestion is posted unseen.

Chosen on the validation split: the lowest threshold t such that the rows with confidence >= t
are right at least `target_precision` of the time with confidence `confidence_level`: the
one-sided Clopper-Pearson lower bound of their precision reaches the target. A share right on a
few hundred validation rows is an estimate, and a threshold fitted to the estimate itself
promised 0.98 and posted at 0.94 on the next month's records of both backtests (bench/README);
the bound asks more of a threshold the fewer rows it rests on (at 0.98 and 0.95, 149 rows all
right, or 236 with one error). Without such a threshold every row goes to review.

A few hundred validation rows rarely hold 149 right at the top, and they are drawn from the
history, not from the month to come. The track record is: the suggestions of earlier runs that
people reviewed and that came back as corrections (data/corrections.py), each with its
confidence and whether it was the account they chose. The threshold is then chosen on the
validation rows and the track record together. Calibrated confidences are taken at their word
across runs and candidates; novel records are left out of the track record, as they are never
posted, and so are the records of the validation and test splits (a reviewed record joins the
ledger and may be drawn into either): validation's already count, test's are held out. Once a
run posts, its posted suggestions are not reviewed, so the track record grows below the threshold
and keeps what earlier runs showed above it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from scipy.stats import beta

from account_tax.data.serialize import ID
from account_tax.data.spec import CONFIDENCE, NOVEL, RIGHT

DECISION = "decision"
"""The column that holds a row's decision."""
AUTO = "auto"
REVIEW = "review"
DECISION_REASON = "decision_reason"
"""The column that says why: `threshold` or `ledger_rule` (posted), `novel`, `below_threshold`
or `no_threshold` (reviewed)."""
THRESHOLD = "threshold"
LEDGER_RULE = "ledger_rule"
POSTED_BY = (THRESHOLD, LEDGER_RULE)


@dataclass(frozen=True)
class TrackRecord:
    """The reviewed suggestions the threshold also rests on: each one's confidence and whether
    people chose the suggested account (see the module's docstring)."""

    confidence: np.ndarray
    right: np.ndarray

    @classmethod
    def read(cls, path: Path | None, scored: pl.Series | None = None) -> TrackRecord:
        """The correct stage's track record, empty without one; novel records are left out, and
        the records whose ids `scored` holds (the validation and test splits'): a validation
        record already counts, with this model's confidence, and a test record is one the
        threshold is judged on."""
        if path is None:
            return cls(np.empty(0), np.empty(0, dtype=bool))
        rows = pl.read_parquet(path, columns=[ID, CONFIDENCE, NOVEL, RIGHT]).filter(~pl.col(NOVEL))
        if scored is not None:
            rows = rows.filter(~pl.col(ID).is_in(scored.cast(pl.String).implode()))
        return cls(rows[CONFIDENCE].to_numpy(), rows[RIGHT].to_numpy())

    def with_validation(self, confidence: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, ...]:
        """The validation rows' confidence and rightness followed by the track record's."""
        return np.concatenate([confidence, self.confidence]), np.concatenate([right, self.right])


def precision_coverage_curve(
    confidence: np.ndarray, correct: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each distinct confidence t (highest first): t, the rows with confidence >= t, their
    precision, and their share of all rows (coverage)."""
    order = np.argsort(-confidence, kind="stable")
    ranked, hits = confidence[order], np.cumsum(correct[order])
    # The last row of each run of equal confidences: a threshold takes all of them or none.
    ends = np.flatnonzero(np.append(ranked[1:] != ranked[:-1], True))
    rows = ends + 1
    return ranked[ends], rows, hits[ends] / rows, rows / len(confidence)


def precision_lower_bound(hits: np.ndarray, rows: np.ndarray, level: float) -> np.ndarray:
    """The one-sided Clopper-Pearson lower bound, at confidence `level`, of the share right
    when `hits` of `rows` are: exact for any count, and 0 without a hit."""
    hits = np.asarray(hits, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.float64)
    bound = beta.ppf(1 - level, np.maximum(hits, 1), rows - hits + 1)
    return np.where(hits > 0, bound, 0.0)


def rows_needed(target_precision: float, confidence_level: float) -> int | None:
    """The fewest rows on which a threshold can rest: all of them right, their lower bound
    just reaches the target. A validation split with fewer can post nothing; None when no
    count can (a target of 1)."""
    if target_precision >= 1:
        return None
    return math.ceil(math.log(1 - confidence_level) / math.log(target_precision))


def threshold_lower_bounds(
    confidence: np.ndarray, correct: np.ndarray, confidence_level: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each distinct confidence (highest first): the threshold, the lower bound of its rows'
    precision at `confidence_level`, and the share of rows it posts."""
    thresholds, rows, precision, share = precision_coverage_curve(
        np.asarray(confidence, dtype=np.float64), np.asarray(correct, dtype=bool)
    )
    bounds = precision_lower_bound(np.rint(precision * rows), rows, confidence_level)
    return thresholds, bounds, share


def auto_threshold(
    confidence: np.ndarray, correct: np.ndarray, target_precision: float, confidence_level: float
) -> float | None:
    """The lowest confidence threshold whose rows reach the target precision at
    `confidence_level` (see the module's docstring), or None."""
    if not len(confidence):
        return None
    thresholds, bounds, _ = threshold_lower_bounds(confidence, correct, confidence_level)
    meets = bounds >= target_precision
    return float(thresholds[meets].min()) if meets.any() else None


def highest_supported_target(
    confidence: np.ndarray, correct: np.ndarray, confidence_level: float
) -> dict[str, float] | None:
    """The highest target precision some threshold on these rows reaches at `confidence_level`
    (the best lower bound over thresholds), that threshold, and the share of the rows it posts:
    what a target would have to be for anything to be posted. None without rows."""
    if not len(confidence):
        return None
    thresholds, bounds, share = threshold_lower_bounds(confidence, correct, confidence_level)
    best = int(np.argmax(bounds))
    return {
        "target_precision": float(bounds[best]),
        "threshold": float(thresholds[best]),
        "coverage": float(share[best]),
    }


def decision_reasons(
    confidence: np.ndarray,
    threshold: float | None,
    novel: np.ndarray | None = None,
    confirmed: np.ndarray | None = None,
) -> np.ndarray:
    """Why each row is posted or reviewed: `threshold` where the confidence reaches it,
    `ledger_rule` where a trusted ledger rule `confirmed` the suggestion below it (see
    `ledger_rules`); `novel` where the record is unlike any training record (see
    `evidence.novelty_threshold`), never posted; else `below_threshold`, or `no_threshold`
    where no threshold reaches the target precision."""
    # In float64, as any reader of the written confidence compares: numpy would compare float32
    # with the threshold rounded to float32, and post a row a float64 reader finds below it.
    if threshold is None:
        reasons = np.full(len(confidence), "no_threshold", dtype=object)
    else:
        confident = np.asarray(confidence, dtype=np.float64) >= threshold
        reasons = np.where(confident, THRESHOLD, "below_threshold").astype(object)
    if confirmed is not None:
        reasons[(reasons != THRESHOLD) & np.asarray(confirmed, dtype=bool)] = LEDGER_RULE
    if novel is not None:
        reasons[np.asarray(novel, dtype=bool)] = "novel"
    return reasons


def decision_of(reasons: np.ndarray) -> np.ndarray:
    """`auto` where the reason posts the row, `review` elsewhere."""
    return np.where(np.isin(reasons, POSTED_BY), AUTO, REVIEW)


def decisions(
    confidence: np.ndarray,
    threshold: float | None,
    novel: np.ndarray | None = None,
    confirmed: np.ndarray | None = None,
) -> np.ndarray:
    """`auto` or `review` for each row, by `decision_reasons`."""
    return decision_of(decision_reasons(confidence, threshold, novel, confirmed))


def coverage(
    confidence: np.ndarray,
    correct: np.ndarray,
    threshold: float | None,
    amounts: np.ndarray | None = None,
    novel: np.ndarray | None = None,
) -> dict[str, Any]:
    """What posting at `threshold` does on a split: the share of rows posted and the precision
    reached among them; with amounts, also the share of the absolute amount posted and the
    amount-weighted accuracy of all rows (a wrong account on a large posting costs more). Novel
    rows are never posted."""
    posted = decisions(confidence, threshold, novel) == AUTO
    result: dict[str, Any] = {
        "threshold": threshold,
        "rows": len(confidence),
        "auto_rows": int(posted.sum()),
        "coverage": float(posted.mean()) if len(confidence) else None,
        "precision": float(correct[posted].mean()) if posted.any() else None,
    }
    if amounts is not None:
        weight = np.abs(np.nan_to_num(np.asarray(amounts, dtype=np.float64)))
        total = weight.sum()
        result["amount_coverage"] = float(weight[posted].sum() / total) if total else None
        result["amount_weighted_accuracy"] = (
            float((weight * correct).sum() / total) if total else None
        )
    return result
