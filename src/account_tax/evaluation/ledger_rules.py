"""Ledger rules: the rules finance teams write in their ledger tools ("this vendor goes to that
account", as in hledger or Firefly III), learned from the labelled records instead of written.

A rule is a key, the values of `review.rules.columns` as cleaning leaves them, that the labelled
records (the ledger with its corrections) booked at least `review.rules.min_bookings` times,
always to one account. A rule makes no suggestion of its own; it confirms one. A suggestion whose
record matches a rule naming the suggested account is posted even below the auto-post threshold
(never a novel record), once the rules are trusted: replayed on the labelled records date by
date, each record matched against the rules that the records of earlier dates made, they were
right often enough that the one-sided lower bound of their precision at `review.confidence_level`
reaches `review.target_precision`, the bar a threshold clears. Without that bound a few agreeing
bookings would post: a record booked one way twice can go another way the third time.

Every prediction shows the rule its record matched, trusted or not (the account and how many
bookings made it): evidence for the person who reviews it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from account_tax.data.spec import DataSpec
from account_tax.errors import DataError
from account_tax.evaluation.review import precision_lower_bound
from account_tax.settings import SectionView

RULE_ACCOUNT = "rule_account"
RULE_BOOKINGS = "rule_bookings"
RULE_COLUMNS = (RULE_ACCOUNT, RULE_BOOKINGS)
"""The columns a prediction shows its record's rule in (null where none matched)."""
NO_RULE = (
    pl.lit(None, dtype=pl.String).alias(RULE_ACCOUNT),
    pl.lit(None, dtype=pl.Int64).alias(RULE_BOOKINGS),
)
"""The rule columns of records matched against no rules."""


@dataclass(frozen=True)
class RuleSettings(SectionView):
    SECTION = "review.rules"
    columns: tuple[str, ...]
    min_bookings: int


def keyed(records: pl.LazyFrame, columns: list[str]) -> pl.LazyFrame:
    """`records` with their key columns as strings, the records without a whole key left out."""
    return records.with_columns(pl.col(columns).cast(pl.String)).drop_nulls(columns)


def learn_rules(
    records: pl.LazyFrame, columns: list[str], label: str, min_bookings: int
) -> pl.DataFrame:
    """One row per key booked at least `min_bookings` times, always to one account: the key's
    columns, the account and the bookings."""
    return (
        keyed(records, columns)
        .group_by(columns)
        .agg(
            pl.col(label).first().cast(pl.String).alias(RULE_ACCOUNT),
            pl.len().cast(pl.Int64).alias(RULE_BOOKINGS),
            pl.col(label).n_unique().alias("accounts"),
        )
        .filter((pl.col("accounts") == 1) & (pl.col(RULE_BOOKINGS) >= min_bookings))
        .drop("accounts")
        .sort(columns)
        .collect()
    )


def replayed(
    records: pl.LazyFrame, columns: list[str], label: str, date: str, min_bookings: int
) -> dict[str, int]:
    """The rules replayed on `records` (see the module's docstring): the dated records, those
    that a rule of the records of earlier dates matched, and those of them booked to the rule's
    account. A key's rule holds before date d while at most one account has a booking before d,
    so each key needs only its bookings by date and the first date of each of its accounts."""
    dated = keyed(records, columns).filter(pl.col(date).is_not_null())
    earlier = (
        dated.group_by([*columns, date])
        .agg(pl.len().alias("bookings"))
        .sort(date)
        .with_columns((pl.col("bookings").cum_sum() - pl.col("bookings")).over(columns))
    )
    first_dates = dated.group_by([*columns, label]).agg(pl.col(date).min().alias("first"))
    per_key = first_dates.group_by(columns).agg(
        pl.col(label).sort_by("first").first().alias(RULE_ACCOUNT),
        pl.col("first").sort().slice(1, 1).first().alias("second_account_from"),
    )
    matched = (
        dated.join(earlier, on=[*columns, date])
        .join(per_key, on=columns)
        .filter(
            (pl.col("bookings") >= min_bookings)
            & (
                pl.col("second_account_from").is_null()
                | (pl.col(date) <= pl.col("second_account_from"))
            )
        )
        .select((pl.col(label) == pl.col(RULE_ACCOUNT)).alias("right"))
        .collect()
    )
    return {
        "dated_records": dated.select(pl.len()).collect().item(),
        "matched": matched.height,
        "right": int(matched["right"].sum()),
    }


def report(
    records: pl.LazyFrame,
    label: str,
    date: str,
    settings: RuleSettings,
    target_precision: float,
    confidence_level: float,
) -> dict[str, Any]:
    """What the replay shows of the rules, and whether they are trusted."""
    columns = list(settings.columns)
    counts = replayed(records, columns, label, date, settings.min_bookings)
    bound = float(precision_lower_bound(counts["right"], counts["matched"], confidence_level))
    return {
        "columns": columns,
        "min_bookings": settings.min_bookings,
        **counts,
        "precision": counts["right"] / counts["matched"] if counts["matched"] else None,
        "lower_bound": bound,
        "target_precision": target_precision,
        "confidence_level": confidence_level,
        "trusted": bound >= target_precision,
    }


def rule_columns(spec: DataSpec, settings: RuleSettings) -> list[str]:
    """`review.rules.columns`, checked: columns the workflow reads other than the label, and a
    date column to replay the rules on."""
    unread = [c for c in settings.columns if c not in spec.columns or c == spec.label]
    if unread:
        raise DataError(
            f"review.rules.columns: {unread} not among the data's columns other than the label"
            f" ({[c for c in spec.columns if c != spec.label]})"
        )
    if settings.columns and not spec.date:
        raise DataError(
            "review.rules.columns: the rules are replayed by date before they may post, and the"
            " data has no date column (data.columns.date)"
        )
    return list(settings.columns)


@dataclass(frozen=True)
class LedgerRules:
    """The learned rules that predict matches records against, and whether they may post."""

    rules: pl.DataFrame
    trusted: bool

    @classmethod
    def read(cls, rules: Path, report: Path) -> LedgerRules:
        trusted = json.loads(report.read_text(encoding="utf-8"))["trusted"]
        return cls(pl.read_parquet(rules), bool(trusted))

    @property
    def columns(self) -> list[str]:
        return [column for column in self.rules.columns if column not in RULE_COLUMNS]

    def matched(self, records: pl.LazyFrame) -> pl.LazyFrame:
        """The account and bookings of the rule each of `records` (cleaned) matches, in their
        order; nulls where none does."""
        keys = records.select(pl.col(self.columns).cast(pl.String))
        rules = self.rules.lazy()
        return keys.join(rules, on=self.columns, how="left", maintain_order="left").select(
            RULE_COLUMNS
        )
