"""Clean: enforce each column's type by its role, normalise text, drop exact duplicates.

Every input row ends in exactly one of: the clean output, the rejects file (with a `reason` that
names the column and the value), or the duplicate count. The three are checked to add up.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl

from account_tax.errors import DataError
from account_tax.io import parquet_rows, require_columns
from account_tax.settings import SOURCE_ROW, DataSpec

log = logging.getLogger(__name__)

REASON = "reason"
SOURCE_FILE = "source_file"
REPLACEMENT_CHARACTER = "\ufffd"


@dataclass(frozen=True)
class CleanCounts:
    rows_in: int
    rows_out: int
    rejected: int
    duplicates: int

    def check(self) -> None:
        if self.rows_in != self.rows_out + self.rejected + self.duplicates:
            raise AssertionError(f"clean lost rows: {self}")


def normalise_text(value: pl.Expr, case: str) -> pl.Expr:
    """NFKC, whitespace runs to one space, trimmed, case policy; empty becomes missing."""
    value = value.str.normalize("NFKC").str.replace_all(r"\s+", " ").str.strip_chars()
    if case == "lower":
        value = value.str.to_lowercase()
    elif case == "upper":
        value = value.str.to_uppercase()
    return pl.when(value.str.len_chars() > 0).then(value)


def _problem(condition: pl.Expr, message: pl.Expr | str) -> pl.Expr:
    """A reason text where `condition` holds, else null."""
    return pl.when(condition).then(message if isinstance(message, pl.Expr) else pl.lit(message))


def _quoted(raw: pl.Expr) -> pl.Expr:
    return pl.concat_str(pl.lit("'"), raw.str.slice(0, 60), pl.lit("'"))


def typed_columns(
    schema: pl.Schema, spec: DataSpec, case: str, require_label: bool
) -> tuple[list[pl.Expr], list[pl.Expr]]:
    """For each column: the typed, normalised value, and the reason it cannot be used (or null)."""
    values: list[pl.Expr] = []
    problems: list[pl.Expr] = []

    def raw(column: str) -> pl.Expr:
        return pl.col(column).cast(pl.String)

    string_columns = ([spec.id] if spec.id else []) + list(spec.string_columns) + [spec.label]
    for column in string_columns:
        if column not in schema:
            continue
        problems.append(
            _problem(
                raw(column).str.contains(REPLACEMENT_CHARACTER, literal=True),
                f"invalid UTF-8 in column '{column}'",
            )
        )
    if spec.id:
        values.append(normalise_text(raw(spec.id), "preserve").alias(spec.id))
        problems.append(_problem(pl.col(spec.id).is_null(), f"missing id in column '{spec.id}'"))
    for column in spec.string_columns:
        values.append(normalise_text(raw(column), case).alias(column))

    for column in spec.numeric:
        dtype = schema[column]
        if dtype.is_numeric():
            parsed = pl.col(column).cast(pl.Float64)
            bad = parsed.is_infinite()
        else:
            text = raw(column).str.strip_chars()
            parsed = text.cast(pl.Float64, strict=False)
            bad = (text.str.len_chars() > 0) & (parsed.is_null() | parsed.is_infinite())
        values.append(parsed.fill_nan(None).alias(column))
        problems.append(
            _problem(
                bad,
                pl.concat_str(
                    pl.lit(f"unparseable number in column '{column}': "), _quoted(raw(column))
                ),
            )
        )

    for column in spec.date:
        dtype = schema[column]
        if dtype == pl.Date:
            parsed, bad = pl.col(column), pl.lit(False)
        elif dtype.is_temporal():
            parsed, bad = pl.col(column).cast(pl.Date), pl.lit(False)
        else:
            text = raw(column).str.strip_chars()
            parsed = text.str.to_date(spec.date_format, strict=False)
            bad = (text.str.len_chars() > 0) & parsed.is_null()
        values.append(parsed.alias(column))
        problems.append(
            _problem(
                bad,
                pl.concat_str(
                    pl.lit(f"unparseable date (format {spec.date_format}) in column '{column}': "),
                    _quoted(raw(column)),
                ),
            )
        )

    if spec.label in schema:
        label = normalise_text(raw(spec.label), "preserve")
        values.append(label.alias(spec.label))
        if require_label:
            problems.append(_problem(label.is_null(), f"missing label in column '{spec.label}'"))
        if spec.classes is not None:
            problems.append(
                _problem(
                    label.is_not_null() & ~label.is_in(list(spec.classes)),
                    pl.concat_str(
                        pl.lit("unknown class "),
                        _quoted(label),
                        pl.lit(f" in column '{spec.label}' (not in data.classes)"),
                    ),
                )
            )
    else:
        values.append(pl.lit(None, dtype=pl.String).alias(spec.label))
    return values, problems


def clean(
    source: Path,
    spec: DataSpec,
    output: Path,
    rejects: Path,
    *,
    case: str = "lower",
    drop_duplicates: bool = True,
    require_label: bool = True,
) -> CleanCounts:
    """Clean `source` (ingest's output) into `output` and `rejects`; return checked counts."""
    frame = pl.scan_parquet(source)
    schema = frame.collect_schema()
    required = [c for c in spec.columns if require_label or c != spec.label]
    require_columns(schema.names(), [SOURCE_ROW, *required], source)
    rows_in = parquet_rows(source)
    if rows_in == 0:
        raise DataError(f"{source}: no rows to clean")

    values, problems = typed_columns(schema, spec, case, require_label)
    reason = pl.concat_str(problems, separator="; ", ignore_nulls=True) if problems else None
    present = [c for c in spec.columns if c in schema]
    parsed = frame.with_columns(
        (pl.when(reason.str.len_chars() > 0).then(reason) if reason is not None else pl.lit(None))
        .cast(pl.String)
        .alias(REASON)
    )
    good = parsed.filter(pl.col(REASON).is_null()).select(SOURCE_ROW, *values)
    bad = parsed.filter(pl.col(REASON).is_not_null()).select(
        SOURCE_ROW,
        pl.lit(str(source)).alias(SOURCE_FILE),
        *(pl.col(c).cast(pl.String) for c in present),
        REASON,
    )
    kept = good.unique(subset=list(spec.columns), keep="first", maintain_order=True)
    if not drop_duplicates:
        kept = good

    output.parent.mkdir(parents=True, exist_ok=True)
    rejects.parent.mkdir(parents=True, exist_ok=True)
    tmp_output = output.with_name(f".{output.name}.tmp")
    tmp_rejects = rejects.with_name(f".{rejects.name}.tmp")
    counted_good, *_ = pl.collect_all(
        [
            good.select(pl.len()),
            kept.sink_parquet(tmp_output, lazy=True),
            bad.sink_parquet(tmp_rejects, lazy=True),
        ]
    )
    os.replace(tmp_output, output)
    os.replace(tmp_rejects, rejects)

    rows_out = parquet_rows(output)
    counts = CleanCounts(
        rows_in=rows_in,
        rows_out=rows_out,
        rejected=parquet_rows(rejects),
        duplicates=counted_good.item() - rows_out,
    )
    counts.check()
    log.info("clean: %s", asdict(counts))
    for reason, count in reject_reasons(rejects):
        log.warning("clean: %d row(s) rejected: %s", count, reason)
    return counts


def reject_reasons(rejects: Path, limit: int = 10) -> list[tuple[str, int]]:
    """The most frequent reasons in a rejects file, with their row counts."""
    frame = pl.scan_parquet(rejects).group_by(REASON).len()
    return list(
        frame.sort("len", REASON, descending=[True, False]).head(limit).collect().iter_rows()
    )


def summary_table(counts: CleanCounts, rejects: Path) -> str:
    """The counts and the main reject reasons as a TSV table, for the report."""
    lines = ["what\trows", *(f"{name}\t{value}" for name, value in asdict(counts).items())]
    lines += [f"rejected: {reason}\t{count}" for reason, count in reject_reasons(rejects)]
    return "\n".join(lines) + "\n"
