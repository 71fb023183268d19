"""Corrections: rows people reviewed, with the account they chose, applied to the clean ledger.

A corrections file (CSV or Parquet) names a record by the ledger's id column, or by `id` as
predict's review file does, and gives the account in the ledger's label column; `reviewed_at`
and `reviewed_by` are optional. Predict's review file, with its label column filled in, is such
a file. Every row of every file ends applied or in the rejects file with its reason (no id, no
account, an account outside data.classes, a `reviewed_at` that is not a time, an id the ledger
does not have, or superseded by a later correction of the same record), and the counts add up.
Each record leaves with `label_source`: `correction` where a correction set its label, else
`ledger`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl

from account_tax.data.clean import REASON, SOURCE_FILE
from account_tax.data.serialize import ID
from account_tax.data.spec import CORRECTION, LABEL_SOURCE, LABEL_TRIM, LEDGER, DataSpec
from account_tax.errors import DataError
from account_tax.io import write_parquets
from account_tax.settings import SOURCE_ROW

log = logging.getLogger(__name__)

REVIEWED_AT, REVIEWED_BY = "reviewed_at", "reviewed_by"
# The ledger's label before a correction replaced it (null where none did).
LEDGER_LABEL = "ledger_label"
_RECORD, _ACCOUNT, _TIME, _ORDER = "_record", "_account", "_time", "_order"


@dataclass(frozen=True)
class CorrectionCounts:
    rows_in: int  # rows of all corrections files
    applied: int  # one per corrected record
    changed: int  # of those, records whose label differs from the ledger's
    superseded: int  # corrections a later one of the same record replaced (in the rejects)
    rejected: int  # every row of the rejects file, the superseded included

    def check(self) -> None:
        if self.rows_in != self.applied + self.rejected:
            raise AssertionError(f"corrections lost rows: {asdict(self)}")


def read_corrections(paths: list[Path], spec: DataSpec) -> pl.DataFrame:
    """Every row of the files as text: the record's id, the account, the time, its file and row,
    and its place in file order."""
    frames = []
    for file_index, path in enumerate(paths):
        try:
            if path.suffix.lower() == ".parquet":
                frame = pl.read_parquet(path)
            else:
                frame = pl.read_csv(path, infer_schema=False)
        except (OSError, pl.exceptions.PolarsError) as error:
            raise DataError(f"{path}: not a readable corrections file ({error})") from None
        id_column = spec.id if spec.id in frame.columns else ID
        missing = [c for c in (id_column, spec.label) if c not in frame.columns]
        if missing:
            raise DataError(
                f"{path}: a corrections file needs the record's id (column '{spec.id}' or "
                f"'{ID}') and the account (column '{spec.label}'); missing: {', '.join(missing)}"
            )
        optional = [
            (pl.col(c).cast(pl.String) if c in frame.columns else pl.lit(None, pl.String)).alias(c)
            for c in (REVIEWED_AT, REVIEWED_BY)
        ]
        frames.append(
            frame.select(
                pl.lit(str(path)).alias(SOURCE_FILE),
                pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias(SOURCE_ROW),
                pl.col(id_column).cast(pl.String).str.strip_chars().alias(_RECORD),
                pl.col(spec.label).cast(pl.String).str.strip_chars(LABEL_TRIM).alias(_ACCOUNT),
                *optional,
                (pl.lit(file_index, pl.Int64) * 2**40 + pl.int_range(pl.len())).alias(_ORDER),
            ).with_columns(pl.col(_RECORD, _ACCOUNT, REVIEWED_AT, REVIEWED_BY).replace("", None))
        )
    return pl.concat(frames) if frames else pl.DataFrame()


def apply_corrections(
    records: Path, corrections: list[Path], spec: DataSpec, output: Path, rejects: Path
) -> CorrectionCounts:
    """Write the records of `records` (clean's output) with the corrections applied and
    `label_source`, and the rows that could not be applied; return the checked counts."""
    if spec.id is None:
        raise DataError("data.corrections needs data.columns.id: a correction names its record")
    ledger = pl.scan_parquet(records)
    known = ledger.select(pl.col(spec.id).cast(pl.String).unique()).collect().to_series()
    rows = read_corrections(corrections, spec)
    time = pl.coalesce(
        pl.col(REVIEWED_AT).str.to_datetime(strict=False, time_zone="UTC"),
        pl.col(REVIEWED_AT).str.to_date(strict=False).cast(pl.Datetime("us", "UTC")),
    )
    problems = [
        (pl.col(_RECORD).is_null(), pl.lit(f"missing id in column '{spec.id}' or '{ID}'")),
        (pl.col(_ACCOUNT).is_null(), pl.lit(f"missing account in column '{spec.label}'")),
        (
            pl.col(REVIEWED_AT).is_not_null() & time.is_null(),
            pl.format(
                "unparseable time in column '{}': '{}' (an ISO date or time)",
                pl.lit(REVIEWED_AT),
                pl.col(REVIEWED_AT),
            ),
        ),
        (
            pl.col(_RECORD).is_not_null() & ~pl.col(_RECORD).is_in(known.implode()),
            pl.format("no record with id '{}' in the ledger", pl.col(_RECORD)),
        ),
    ]
    if spec.classes is not None:
        problems.append(
            (
                pl.col(_ACCOUNT).is_not_null() & ~pl.col(_ACCOUNT).is_in(list(spec.classes)),
                pl.format(
                    "unknown class '{}' in column '{}' (not in data.classes)",
                    pl.col(_ACCOUNT),
                    pl.lit(spec.label),
                ),
            )
        )
    reason = pl.when(pl.any_horizontal(bad for bad, _ in problems)).then(
        pl.concat_str(
            [pl.when(bad).then(text) for bad, text in problems], separator="; ", ignore_nulls=True
        )
    )
    checked = rows.with_columns(time.alias(_TIME), reason.alias(REASON))
    usable = checked.filter(pl.col(REASON).is_null())
    # The latest correction of a record: by time (none counts as older), then file and row.
    usable = usable.sort(_TIME, _ORDER, nulls_last=False)
    latest = usable.unique(_RECORD, keep="last", maintain_order=True)
    winner = latest.select(
        _RECORD, pl.format("row {} of {}", SOURCE_ROW, SOURCE_FILE).alias("_winner")
    )
    superseded = (
        usable.join(latest.select(_ORDER), on=_ORDER, how="anti")
        .join(winner, on=_RECORD)
        .with_columns(
            pl.format("superseded by the later correction in {}", "_winner").alias(REASON)
        )
    )
    rejected = pl.concat([checked.filter(pl.col(REASON).is_not_null()), superseded.drop("_winner")])

    corrected = ledger.join(
        latest.lazy().select(_RECORD, _ACCOUNT, REVIEWED_AT, REVIEWED_BY),
        left_on=pl.col(spec.id).cast(pl.String),
        right_on=_RECORD,
        how="left",
        maintain_order="left",
    ).drop(_RECORD, strict=False)
    labelled = corrected.with_columns(
        pl.when(pl.col(_ACCOUNT).is_not_null()).then(pl.col(spec.label)).alias(LEDGER_LABEL),
        pl.coalesce(_ACCOUNT, spec.label).alias(spec.label),
        pl.when(pl.col(_ACCOUNT).is_not_null())
        .then(pl.lit(CORRECTION))
        .otherwise(pl.lit(LEDGER))
        .alias(LABEL_SOURCE),
    ).drop(_ACCOUNT)
    write_parquets(
        {
            output: labelled,
            rejects: rejected.select(
                SOURCE_FILE,
                SOURCE_ROW,
                pl.col(_RECORD).alias(spec.id),
                pl.col(_ACCOUNT).alias(spec.label),
                REVIEWED_AT,
                REVIEWED_BY,
                REASON,
            ).lazy(),
        }
    )
    applied = pl.scan_parquet(output).filter(pl.col(LABEL_SOURCE) == CORRECTION)
    counts = CorrectionCounts(
        rows_in=rows.height,
        applied=latest.height,
        changed=applied.filter(pl.col(LEDGER_LABEL) != pl.col(spec.label))
        .select(pl.len())
        .collect()
        .item(),
        superseded=superseded.height,
        rejected=rejected.height,
    )
    counts.check()
    for row in superseded.head(5).iter_rows(named=True):
        log.warning(
            "correct: record %s corrected more than once; row %d of %s is superseded by %s",
            row[_RECORD],
            row[SOURCE_ROW],
            row[SOURCE_FILE],
            row["_winner"],
        )
    log.info("correct: %s", asdict(counts))
    return counts
