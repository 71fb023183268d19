"""Which records a backtest replays, and in which periods: each record's month or quarter from
the date column, the periods replayed (the latest `backtest.periods`, at least one before them as
history) and the variants compared. Nothing here runs a model."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from account_tax.data.spec import DataSpec
from account_tax.errors import DataError
from account_tax.settings import SOURCE_ROW, SectionView

log = logging.getLogger(__name__)

PERIOD = "period"


@dataclass(frozen=True)
class Variant:
    """One of `backtest.variants`: what flows into the next period."""

    corrections: bool
    warm_start: bool


@dataclass(frozen=True)
class BacktestSettings(SectionView):
    SECTION = "backtest"
    period: str
    periods: int
    date_column: str | None
    variants: dict[str, dict[str, bool]]

    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            raise DataError(f"backtest.variants has no variant {name!r}: {sorted(self.variants)}")
        return Variant(**self.variants[name])


def period_labels(dates: pl.Expr, period: str) -> pl.Expr:
    """`2024-03` for a month, `2024-Q1` for a quarter."""
    if period == "month":
        return dates.dt.strftime("%Y-%m")
    return dates.dt.year().cast(pl.String) + "-Q" + dates.dt.quarter().cast(pl.String)


def date_column(spec: DataSpec, settings: BacktestSettings) -> str:
    """The column whose dates place the records in periods: `backtest.date_column`, one of the
    data's date columns, else the first of them. A backtest also needs the records' ids: checked
    here, before any job where a backtest is among them (workflow/rules/common.smk)."""
    if spec.id is None:
        raise DataError(
            "backtest: the data has no id column (data.columns.id): posted and reviewed records"
            " are followed by id"
        )
    if not spec.date:
        raise DataError("backtest: the data has no date column (data.columns.date)")
    column = settings.date_column or spec.date[0]
    if column not in spec.date:
        raise DataError(
            f"config `backtest.date_column`: {column!r} is not among the data's date columns"
            f" (data.columns.date: {list(spec.date)})"
        )
    return column


def dated_records(
    raw: Path, labelled: Path, spec: DataSpec, settings: BacktestSettings
) -> pl.DataFrame:
    """Every usable record as read (strings, the ledger's own columns) with its period, its true
    account and its `source_row`, in ledger order. Rows without a date cannot be placed: an
    error names how many."""
    column = date_column(spec, settings)
    truth = pl.read_parquet(labelled).select(
        SOURCE_ROW, period_labels(pl.col(column), settings.period).alias(PERIOD), spec.label
    )
    undated = truth.filter(pl.col(PERIOD).is_null()).height
    if undated:
        raise DataError(
            f"{labelled}: {undated} record(s) without a {column!r}; a backtest needs one"
        )
    as_read = pl.read_parquet(raw).select(SOURCE_ROW, *(c for c in spec.columns if c != spec.label))
    # Records that data.corrections added are numbered after the ledger file's rows.
    added = truth.join(as_read, on=SOURCE_ROW, how="anti").height
    if added:
        log.warning(
            "backtest: the %d record(s) that data.corrections added to the ledger are not"
            " replayed: a backtest replays the records of the ledger file, as read",
            added,
        )
    return truth.join(as_read, on=SOURCE_ROW, how="inner", maintain_order="left").sort(SOURCE_ROW)


def replayed_periods(records: pl.DataFrame, settings: BacktestSettings) -> list[str]:
    """The last `periods` periods; at least one period before them is the history."""
    periods = records[PERIOD].unique().sort().to_list()
    if len(periods) <= settings.periods:
        raise DataError(
            f"backtest.periods is {settings.periods} but the data spans {len(periods)}"
            f" {settings.period}(s) ({periods[0]} to {periods[-1]}): at least one must come before"
        )
    return periods[-settings.periods :]
