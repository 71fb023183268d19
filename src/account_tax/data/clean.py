"""Clean: enforce each column's type by its role, normalise text, drop exact duplicates, reject
a second record of an id.

Every input row ends in exactly one of: the clean output, the rejects file (with a `reason` that
names the column and the value), or the duplicate count. The three are checked to add up.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl

from account_tax.data.ingest import RECORD_PROBLEM, SOURCE_FILE_KEY
from account_tax.data.spec import LABEL_TRIM, DataSpec
from account_tax.errors import DataError
from account_tax.io import (
    EARLIEST_YEAR,
    is_utf8,
    parquet_rows,
    require_columns,
    write_parquets,
)
from account_tax.settings import SOURCE_ROW, SectionView

log = logging.getLogger(__name__)

REASON = "reason"
SOURCE_FILE = "source_file"
REPLACEMENT_CHARACTER = "\ufffd"
ROW_HASH = "__row_hash"
POSITION = "__position"
UNUSABLE = "__unusable"
NUMBER_SPACES = {" ": "[ \u00a0\u202f]", "'": "['\u2019]"}
"""The characters a thousands separator stands for: a spreadsheet writes a space as a no-break
space (French) or a narrow one, an apostrophe as a typographic one (Swiss)."""
# A text column with at most this many distinct values (estimated) is normalised once per value
# and mapped, instead of once per row.
FEW_DISTINCT = 100_000


@dataclass(frozen=True)
class CleanSettings(SectionView):
    SECTION = "clean"
    case: str
    drop_duplicates: bool


@dataclass(frozen=True)
class CleanCounts:
    rows_in: int
    rows_out: int
    rejected: int
    duplicates: int

    def check(self) -> None:
        if self.rows_in != self.rows_out + self.rejected + self.duplicates:
            raise AssertionError(f"clean lost rows: {self}")

    @classmethod
    def read(cls, path: Path) -> CleanCounts:
        """The counts clean wrote (`counts.json`): its one reader."""
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def normalise_text(value: pl.Expr, case: str) -> pl.Expr:
    """NFKC, whitespace runs to one space, trimmed, case policy; empty becomes missing."""
    # NFKC leaves ASCII as it is, so only values with other characters pay for it.
    ascii_only = value.str.len_bytes() == value.str.len_chars()
    value = pl.when(ascii_only).then(value).otherwise(value.str.normalize("NFKC"))
    # Same result as replacing every `\s+`, but skips the single spaces, most of the matches.
    value = value.str.replace_all(r"\s{2,}|[^\S ]", " ").str.strip_chars()
    if case == "lower":
        value = value.str.to_lowercase()
    elif case == "upper":
        value = value.str.to_uppercase()
    # Not `replace("", None)`: that holds the whole column instead of streaming it.
    return pl.when(value.str.len_bytes() > 0).then(value)


def few_distinct_values(frame: pl.LazyFrame, columns: Sequence[str]) -> dict[str, pl.Series]:
    """The distinct values of each of `columns` that has few of them (categories, labels).

    An estimate comes first, so a column of mostly unique values is never collected.
    """
    if not columns:
        return {}
    estimates = frame.select(pl.col(columns).cast(pl.String).approx_n_unique())
    counts = estimates.collect(engine="streaming").row(0, named=True)
    few = [column for column, n in counts.items() if n <= FEW_DISTINCT]
    if not few:
        return {}
    distinct = frame.select(pl.col(c).cast(pl.String).unique().drop_nulls().implode() for c in few)
    # One row of lists: each column's first (only) value is its Series of distinct values.
    return {c: values[0] for c, values in distinct.collect(engine="streaming").to_dict().items()}


def normalised_column(column: str, case: str, distinct: Mapping[str, pl.Series]) -> pl.Expr:
    """`normalise_text` of a column; one with few distinct values is normalised once per value."""
    raw = pl.col(column).cast(pl.String)
    if column not in distinct:
        return normalise_text(raw, case)
    values = distinct[column]
    normalised = pl.select(normalise_text(pl.lit(values, dtype=pl.String), case)).to_series()
    # A value's code as an Enum of `values` is its position there, which picks its normalised
    # form. Unlike `replace_strict`, this streams; a value not in `values` is an error.
    return pl.lit(normalised).gather(raw.cast(pl.Enum(values)).to_physical())


Problem = tuple[pl.Expr, pl.Expr]
"""When a row cannot be used (never null), and the reason text to give."""


def _problem(condition: pl.Expr, message: pl.Expr | str) -> Problem:
    return condition.fill_null(False), message if isinstance(message, pl.Expr) else pl.lit(message)


def _quoted(raw: pl.Expr) -> pl.Expr:
    return pl.concat_str(pl.lit("'"), raw.str.slice(0, 60), pl.lit("'"))


def text_columns(schema: pl.Schema, spec: DataSpec) -> list[str]:
    """The id, text, categorical and label columns present in `schema`."""
    columns = ([spec.id] if spec.id else []) + list(spec.string_columns) + [spec.label]
    return [column for column in columns if column in schema]


def row_hash(columns: Sequence[str]) -> pl.Expr:
    """A 64-bit hash of a row's values: equal rows get equal hashes, distinct ones rarely do."""
    return pl.struct(columns).hash()


def decimal_separator(number_format: str) -> str:
    """The decimal separator of one of `data.number_format`'s forms: its last but one character."""
    return number_format[-2]


def plain_number(text: pl.Expr, number_format: str) -> pl.Expr:
    """`text`, a number written in `number_format` (one of `data.number_format`'s), as Python
    writes it: its thousands separators dropped where they group digits in threes, its decimal
    comma a point. Null where a decimal comma's number holds a point, which is neither."""
    decimal = decimal_separator(number_format)
    thousands = number_format[1] if len(number_format) == len("1,234.5") else None
    if thousands is not None:
        if thousands in NUMBER_SPACES:
            text = text.str.replace_all(NUMBER_SPACES[thousands], thousands)
        grouped = rf"^[+-]?\d{{1,3}}(?:{re.escape(thousands)}\d{{3}})+(?:{re.escape(decimal)}\d*)?$"
        text = (
            pl.when(text.str.contains(grouped))
            .then(text.str.replace_all(thousands, "", literal=True))
            .otherwise(text)
        )
    if decimal == ",":
        text = pl.when(~text.str.contains(".", literal=True)).then(
            text.str.replace(",", ".", literal=True)
        )
    return text


def written_number(value: pl.Expr, number_format: str) -> pl.Expr:
    """A numeric `value` as text that `plain_number` reads back in `number_format`: ungrouped,
    with the format's decimal separator."""
    return value.cast(pl.String).str.replace(".", decimal_separator(number_format), literal=True)


def written_columns(schema: pl.Schema, spec: DataSpec, columns: Sequence[str]) -> list[pl.Expr]:
    """`columns` as text that clean reads back as the values they are: a date or a number that a
    Parquet or Excel file typed is written as data.date_format or data.number_format read it,
    anything else as it stands."""

    def written(column: str) -> pl.Expr:
        dtype = schema[column]
        if column in spec.date and dtype.is_temporal():
            return pl.col(column).dt.strftime(spec.date_format)
        if column in spec.numeric and dtype.is_numeric():
            return written_number(pl.col(column), spec.number_format)
        return pl.col(column).cast(pl.String)

    return [written(column).alias(column) for column in columns]


def later_duplicates(records: pl.LazyFrame, columns: Sequence[str]) -> pl.Series:
    """Positions of the rows of `records` equal in all `columns` to an earlier row.

    `records` carries each row's `row_hash` in ROW_HASH. Only the hashes are held for every row;
    the rows whose hash is shared are then compared value by value, so two distinct rows whose
    hashes collide are both kept.
    """
    hashes = records.select(ROW_HASH).with_row_index(POSITION).collect(engine="streaming")
    shared = hashes.filter(pl.col(ROW_HASH).is_duplicated()).get_column(POSITION)
    candidates = (
        records.with_row_index(POSITION)
        .filter(pl.col(POSITION).is_in(shared.implode()))
        .collect(engine="streaming")
    )
    repeated = candidates.filter(~pl.struct(columns).is_first_distinct())
    return repeated.get_column(POSITION)


def taken_ids(records: pl.LazyFrame, id_column: str) -> pl.DataFrame:
    """The rows of `records` whose id an earlier row has: their SOURCE_ROW and REASON.

    `records` carries each row's position in POSITION. Only each id's count and first position
    are held for every id; the rows of the few shared ones are then collected.
    """
    count, first, first_row = "__rows", "__first", "__first_row"
    ids = records.group_by(id_column).agg(
        pl.len().alias(count), pl.col(POSITION).min().alias(first)
    )
    shared = ids.filter(pl.col(count) > 1).drop(count).collect(engine="streaming")
    rows = records.join(shared.lazy(), on=id_column).collect(engine="streaming")
    first_rows = rows.filter(pl.col(POSITION) == pl.col(first)).select(
        id_column, pl.col(SOURCE_ROW).alias(first_row)
    )
    later = rows.filter(pl.col(POSITION) != pl.col(first)).join(first_rows, on=id_column)
    return later.sort(POSITION).select(
        SOURCE_ROW,
        pl.concat_str(
            pl.lit("duplicate id "),
            _quoted(pl.col(id_column)),
            pl.lit(f" in column '{id_column}', first in row "),
            pl.col(first_row).cast(pl.String),
        ).alias(REASON),
    )


def as_rejects(
    rows: pl.LazyFrame, spec: DataSpec, source_file: str, reason: pl.Expr
) -> pl.LazyFrame:
    """Rows of ingest's output as read, with the raw file's name and the `reason`: a rejects file's
    rows."""
    present = [c for c in spec.columns if c in rows.collect_schema()]
    return rows.select(
        SOURCE_ROW,
        pl.lit(source_file).alias(SOURCE_FILE),
        *(pl.col(c).cast(pl.String) for c in present),
        reason.cast(pl.String).alias(REASON),
    )


def typed_columns(
    schema: pl.Schema,
    spec: DataSpec,
    case: str,
    require_label: bool,
    distinct: Mapping[str, pl.Series],
) -> tuple[list[pl.Expr], list[Problem]]:
    """The typed, normalised value of each column, and the problems that make a row unusable.

    `distinct` holds the distinct values of the text columns that have few (`few_distinct_values`).
    """
    values: list[pl.Expr] = []
    problems: list[Problem] = []

    def raw(column: str) -> pl.Expr:
        return pl.col(column).cast(pl.String)

    # Ingest replaced the bytes that no encoding read (io.as_utf8).
    invalid = "invalid UTF-8" if is_utf8(spec.encoding) else f"neither UTF-8 nor {spec.encoding}"
    for column in text_columns(schema, spec):
        problems.append(
            _problem(
                raw(column).str.contains(REPLACEMENT_CHARACTER, literal=True),
                f"{invalid} in column '{column}'",
            )
        )
    if spec.id:
        # Missing as written: an id of spaces alone is none once normalised.
        record_id = normalised_column(spec.id, "preserve", distinct)
        values.append(record_id.alias(spec.id))
        problems.append(_problem(record_id.is_null(), f"missing id in column '{spec.id}'"))
    for column in spec.string_columns:
        values.append(normalised_column(column, case, distinct).alias(column))

    for column in spec.numeric:
        dtype = schema[column]
        if dtype.is_numeric():
            parsed = pl.col(column).cast(pl.Float64)
            bad = parsed.is_infinite()
        else:
            text = raw(column).str.strip_chars()
            parsed = plain_number(text, spec.number_format).cast(pl.Float64, strict=False)
            # A NaN written out is missing only where data.null_values says so, as other text is.
            bad = (text.str.len_chars() > 0) & (
                parsed.is_null() | parsed.is_infinite() | parsed.is_nan()
            )
        values.append(parsed.fill_nan(None).alias(column))
        problems.append(
            _problem(
                bad,
                pl.concat_str(
                    pl.lit(
                        f"unparseable number (format {spec.number_format}) in column '{column}': "
                    ),
                    _quoted(raw(column)),
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
        # `%Y` reads a two-digit year as it stands: 15.03.24 would be the year 24.
        problems.append(
            _problem(
                parsed.dt.year() < EARLIEST_YEAR,
                pl.concat_str(
                    pl.lit(
                        f"date before the year {EARLIEST_YEAR} (format {spec.date_format}; a"
                        f" two-digit year?) in column '{column}': "
                    ),
                    _quoted(raw(column)),
                ),
            )
        )

    # A blank line, or a row of an account alone: nothing to suggest an account from, nor to
    # learn one from (its text would be empty).
    features = [c for c in spec.feature_columns if c in schema]
    if features:
        problems.append(
            _problem(
                pl.all_horizontal(
                    raw(c).str.strip_chars().fill_null("").str.len_chars() == 0 for c in features
                ),
                f"no value in any of the columns {', '.join(map(repr, features))}",
            )
        )

    if spec.label in schema:
        # Verbatim but for the ends, as data.classes are read: a label is a name, not text.
        label = raw(spec.label).str.strip_chars(LABEL_TRIM)
        label = pl.when(label.str.len_bytes() > 0).then(label)
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


def usable_and_rejected(
    frame: pl.LazyFrame,
    spec: DataSpec,
    case: str,
    require_label: bool,
    source_file: str,
    distinct: Mapping[str, pl.Series],
) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Ingest's rows (`frame`) split into the usable ones, typed and normalised, and the rejected
    ones as read, with the raw file's name and the reason. Row by row, so any slice of the rows
    gets the same answer: `predict` cleans a chunk at a time. `distinct`: see `typed_columns`."""
    schema = frame.collect_schema()
    values, problems = typed_columns(schema, spec, case, require_label, distinct)
    unusable = pl.any_horizontal(c for c, _ in problems) if problems else pl.lit(False)
    # The reason texts are built for the rejected rows only: most rows need just the flags.
    reason = pl.concat_str(
        [pl.when(c).then(message) for c, message in problems] or [pl.lit(None)],
        separator="; ",
        ignore_nulls=True,
    )
    if RECORD_PROBLEM in schema:
        # A malformed CSV record: its values are whatever its fields gave, so its problem is
        # the whole reason.
        unusable = unusable | pl.col(RECORD_PROBLEM).is_not_null()
        reason = pl.coalesce(pl.col(RECORD_PROBLEM), reason)
    flagged = frame.with_columns(unusable.alias(UNUSABLE))
    good = flagged.filter(~pl.col(UNUSABLE)).select(SOURCE_ROW, *values)
    bad = as_rejects(flagged.filter(pl.col(UNUSABLE)), spec, source_file, reason)
    return good, bad


def clean(
    source: Path,
    spec: DataSpec,
    output: Path,
    rejects: Path,
    options: CleanSettings,
    *,
    require_label: bool = True,
) -> CleanCounts:
    """Clean `source` (ingest's output) into `output` and `rejects`; return checked counts.
    Training data (`require_label`) of which every row is rejected is a DataError naming the
    file and the commonest reasons: there is nothing to train on.

    The rejects name the raw file that ingest read (from `source`'s footer), where `source_row`
    counts; a records file written otherwise names itself.
    """
    frame = pl.scan_parquet(source)
    schema = frame.collect_schema()
    required = [c for c in spec.columns if require_label or c != spec.label]
    require_columns(schema.names(), [SOURCE_ROW, *required], source)
    rows_in = parquet_rows(source)
    if rows_in == 0:
        raise DataError(f"{source}: no rows to clean")
    source_file = pl.read_parquet_metadata(source).get(SOURCE_FILE_KEY, str(source))

    normalised = [c for c in text_columns(schema, spec) if c != spec.label]
    distinct = few_distinct_values(frame, normalised)
    good, bad = usable_and_rejected(frame, spec, options.case, require_label, source_file, distinct)

    # The usable rows are written first, with their hashes where duplicates are dropped, and the
    # rows to leave out found from that file, so that the distinct rows are never all in memory.
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.") as work:
        usable, unusable = Path(work) / "usable.parquet", Path(work) / "unusable.parquet"
        if options.drop_duplicates:
            good = good.with_columns(row_hash(spec.columns).alias(ROW_HASH))
        write_parquets({usable: good, unusable: bad}, scratch={usable, unusable})
        repeated = (
            later_duplicates(pl.scan_parquet(usable), spec.columns)
            if options.drop_duplicates
            else pl.Series(POSITION, [], dtype=pl.UInt32)
        )
        kept = pl.scan_parquet(usable).with_row_index(POSITION)
        kept = kept.filter(~pl.col(POSITION).is_in(repeated.implode()))
        bad = pl.scan_parquet(unusable)
        taken = taken_ids(kept, spec.id) if spec.id else None
        if taken is not None and taken.height:
            kept = kept.filter(~pl.col(SOURCE_ROW).is_in(taken.get_column(SOURCE_ROW).implode()))
            named = frame.join(taken.lazy(), on=SOURCE_ROW)
            taken_rows = as_rejects(named, spec, source_file, pl.col(REASON))
            bad = pl.concat([bad, taken_rows]).sort(SOURCE_ROW)
        write_parquets({output: kept.drop(POSITION, ROW_HASH, strict=False), rejects: bad})
    duplicates = repeated.len()

    rows_out = parquet_rows(output)
    counts = CleanCounts(
        rows_in=rows_in,
        rows_out=rows_out,
        rejected=parquet_rows(rejects),
        duplicates=duplicates,
    )
    counts.check()
    log.info("clean: %s", asdict(counts))
    reasons = reject_reasons(pl.scan_parquet(rejects))
    for reason, count in reasons:
        log.warning("clean: %d row(s) rejected: %s", count, reason)
    if require_label and counts.rejected == rows_in:
        commonest = "; ".join(f"{reason} ({count} rows)" for reason, count in reasons[:3])
        raise DataError(
            f"{source_file}: all {rows_in} rows were rejected, nothing is left to train on; "
            f"the commonest reasons: {commonest}"
        )
    return counts


def reject_reasons(rejects: pl.LazyFrame, limit: int = 10) -> list[tuple[str, int]]:
    """The most frequent reasons among rejected rows, with their row counts."""
    frame = rejects.group_by(REASON).len()
    return list(
        frame.sort("len", REASON, descending=[True, False]).head(limit).collect().iter_rows()
    )


def summary_table(counts: Mapping[str, int], rejects: pl.LazyFrame) -> str:
    """A stage's counts and the main reasons of its `rejects` as a TSV table, for the report."""
    lines = ["what\trows", *(f"{name}\t{value}" for name, value in counts.items())]
    lines += [f"rejected: {reason}\t{count}" for reason, count in reject_reasons(rejects)]
    return "\n".join(lines) + "\n"
