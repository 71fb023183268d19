"""Corrections: rows people reviewed, with the account they chose, applied to the clean ledger.

A corrections file (CSV, Parquet or an Excel workbook) names a record by the ledger's id
column, or by `id` as predict's review file does, and gives the account in the ledger's label
column; `reviewed_at` and `reviewed_by` are optional. Predict's review file, with its label
column filled in, is such a file. A row whose id the ledger does not have but that carries every
column of a record (as predict's review file does) is a new record: cleaned as the ledger was,
it joins the ledger.
Every row of every file ends applied, added or in the rejects file with its reason (no id, no
account, an account outside data.classes, a `reviewed_at` that is not a time, an id the ledger
does not have in a file without the record's columns, a new record that clean rejects, or
superseded by a later correction of the same record), and the counts add up.
Each record leaves with `label_source`: `correction` where a correction set its label, else
`ledger`.

A CSV file is read as a spreadsheet may save it (`io.read_spreadsheet_csv`): in UTF-8 or its
system's code page (`data.encoding`), separated by its locale's list separator (a semicolon in
much of Europe), formulas escaped by predict's CSV copy of the review file read back, dates in
its locale's short form (15.03.2024), with or without a time, read as dates
(`io.spreadsheet_dates`), true and false in its locale's words, and ids and accounts with the
leading zeros it dropped put back where exactly one known code fits (`leading_zeros`). A
workbook's sheets with the id and account columns are read as text as a CSV file would hold them
(`workbook.read_workbook`), and then as a CSV file is.

A file that also says what was suggested (`predicted_label`, `confidence`, `novel`, as predict's
review file does) gives the track record: for each correction used, the suggestion people were
shown, its confidence, and whether it was the account they chose. Evaluate weighs it with the
validation rows when it picks the auto-post threshold (evaluation/assessment.py).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from account_tax.data.clean import (
    REASON,
    SOURCE_FILE,
    CleanSettings,
    clean,
    decimal_separator,
    normalise_text,
    summary_table,
)
from account_tax.data.serialize import ID
from account_tax.data.spec import (
    ACCOUNTS_SHEET,
    CONFIDENCE,
    CORRECTION,
    LABEL_SOURCE,
    LABEL_TRIM,
    LEDGER,
    NOVEL,
    PREDICTED_LABEL,
    RIGHT,
    DataSpec,
)
from account_tax.errors import DataError
from account_tax.io import (
    ISO_DATE,
    SPREADSHEET_BOOLEANS,
    SPREADSHEET_TIMES,
    read_spreadsheet_csv,
    spreadsheet_dates,
    write_parquet,
    write_parquets,
)
from account_tax.settings import SOURCE_ROW

log = logging.getLogger(__name__)

REVIEWED_AT, REVIEWED_BY = "reviewed_at", "reviewed_by"
# How a spreadsheet writes a long number it has rounded to a few digits: 1,23457E+11.
ROUNDED_NUMBER = r"^[+-]?\d+([.,]\d+)?[Ee][+-]?\d+$"
# The ledger's label before a correction replaced it (null where none did).
LEDGER_LABEL = "ledger_label"
SUPERSEDED = "superseded by the later correction in"
"""The start of a superseded correction's reject reason, which goes on to name the winner."""
WORKBOOK = ".xlsx"
_RECORD, _ACCOUNT, _TIME, _ORDER, _WHOLE = "_record", "_account", "_time", "_order", "_whole"
# The kind of the row's file: a spreadsheet may have saved a CSV file or a workbook, which drop
# leading zeros, and only a CSV file holds a long number as the text it showed (1,23457E+11).
_KIND, CSV, XLSX, PARQUET = "_kind", "csv", "xlsx", "parquet"
_SUGGESTION, _SUGGESTED = (PREDICTED_LABEL, CONFIDENCE, NOVEL), "_suggested"


@dataclass(frozen=True)
class CorrectionCounts:
    rows_in: int  # rows of all corrections files
    applied: int  # one per corrected record of the ledger
    changed: int  # of those, records whose label differs from the ledger's
    added: int  # new records that joined the ledger
    superseded: int  # corrections a later one of the same record replaced (in the rejects)
    rejected: int  # every row of the rejects file, the superseded included
    track_record: int  # corrections used that say what was suggested (the track record's rows)

    def check(self) -> None:
        if self.rows_in != self.applied + self.added + self.rejected:
            raise AssertionError(f"corrections lost rows: {asdict(self)}")


def record_columns(spec: DataSpec) -> list[str]:
    """What a corrections row needs besides its account to be a whole record."""
    return [c for c in spec.columns if c != spec.label]


def correction_summary(counts: CorrectionCounts, rejects: Path, track_record: Path) -> str:
    """The counts, how many reviewed suggestions people kept, and the main reasons of the rows
    refused (the superseded are counted on their own line), as a TSV table for the report."""
    kept = pl.scan_parquet(track_record).select(pl.col(RIGHT).sum()).collect().item()
    refused = pl.scan_parquet(rejects).filter(~pl.col(REASON).str.starts_with(SUPERSEDED))
    return summary_table(asdict(counts) | {"track_record: suggestion kept": kept}, refused)


def review_time(text: str) -> datetime | None:
    """An ISO 8601 date or time, or a date and time in a spreadsheet's form once its date is ISO
    (`SPREADSHEET_TIMES`), in UTC (one without an offset taken as UTC), or None. Value by value:
    polars' format guess, made once per column, failed every time not in the form of the column's
    first (2025-01-06T09:00Z after 2025-01-06 09:00) and read 3/5/2026 as it guessed."""
    text = text.strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = next(filter(None, (_strptime(text, form) for form in SPREADSHEET_TIMES)), None)
        if moment is None:
            return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _strptime(text: str, form: str) -> datetime | None:
    try:
        return datetime.strptime(text, form)
    except ValueError:
        return None


def corrections_sheets(path: Path, spec: DataSpec) -> list[tuple[str, pl.DataFrame]]:
    """A corrections file's tables, each with the name its rows' rejects give as their file: a
    Parquet or CSV file's one table, or the sheets of an Excel workbook that have the id and
    account columns (its other sheets, such as the accounts predict's workbook lists, hold no
    corrections; where none has them, the first, to be refused for what it lacks). Text dates in
    a spreadsheet locale's short form are read as dates (`io.spreadsheet_dates`)."""
    try:
        if path.suffix.lower() == ".parquet":
            return [(str(path), pl.read_parquet(path))]
        if path.suffix.lower() == WORKBOOK:
            # Here, not at the top: only a run that reads a workbook loads openpyxl.
            from account_tax.workbook import read_workbook

            decimal = decimal_separator(spec.number_format)
            sheets = [(f"{path} [{title}]", frame) for title, frame in read_workbook(path, decimal)]
        else:
            sheets = [(str(path), read_spreadsheet_csv(path, spec.encoding))]
    except (OSError, KeyError, zipfile.BadZipFile, pl.exceptions.PolarsError) as error:
        raise DataError(f"{path}: not a readable corrections file ({error})") from None
    if not sheets:
        raise DataError(f"{path}: no sheet of the workbook has a header row")
    with_columns = [
        (source, frame)
        for source, frame in sheets
        if {spec.label} <= set(frame.columns) and {spec.id, ID} & set(frame.columns)
    ]
    read = {source for source, _ in with_columns} | {f"{path} [{ACCOUNTS_SHEET}]"}
    skipped = [source for source, frame in sheets if frame.height and source not in read]
    if with_columns and skipped:
        log.warning(
            "%s read as no corrections: no column '%s' and '%s' (or '%s') in their header row",
            ", ".join(skipped),
            spec.label,
            spec.id,
            ID,
        )
    return [
        (
            source,
            spreadsheet_dates(
                spreadsheet_dates(frame, spec.date, spec.date_format), [REVIEWED_AT], ISO_DATE
            ),
        )
        for source, frame in with_columns or sheets[:1]
    ]


def read_corrections(paths: list[Path], spec: DataSpec) -> pl.DataFrame:
    """Every row of the files as text: the record's id, the account, the time, its file (and
    sheet) and row, its place in file order, and the record's columns where its file has them
    all."""
    frames = []
    kinds = {".parquet": PARQUET, WORKBOOK: XLSX}
    sheets = (
        (kinds.get(path.suffix.lower(), CSV), source, frame)
        for path in paths
        for source, frame in corrections_sheets(path, spec)
    )
    for kind, source, frame in sheets:
        id_column = spec.id if spec.id in frame.columns else ID
        missing = [c for c in (id_column, spec.label) if c not in frame.columns]
        if missing:
            raise DataError(
                f"{source}: a corrections file needs the record's id (column '{spec.id}' or "
                f"'{ID}') and the account (column '{spec.label}'); missing: {', '.join(missing)}"
            )
        optional = [
            (pl.col(c).cast(pl.String) if c in frame.columns else pl.lit(None, pl.String)).alias(c)
            for c in (REVIEWED_AT, REVIEWED_BY)
        ]
        whole = all(c in frame.columns for c in record_columns(spec))
        record = [
            (pl.col(c).cast(pl.String) if whole else pl.lit(None, pl.String)).alias(f"_{c}")
            for c in record_columns(spec)
        ]
        # The suggestion as the file gives it; none where it lacks one of its columns, and
        # none for a row whose suggestion does not read (it still corrects its record).
        suggested = all(c in frame.columns for c in _SUGGESTION)
        confidence = pl.col(CONFIDENCE)
        if frame.schema.get(CONFIDENCE) == pl.String:
            # A spreadsheet may write the decimal point as its locale's comma.
            confidence = confidence.str.replace(",", ".", literal=True)
        confidence = confidence.cast(pl.Float64, strict=False)
        suggestion = (
            [
                pl.col(PREDICTED_LABEL).cast(pl.String).str.strip_chars(LABEL_TRIM),
                pl.when(confidence.is_between(0, 1)).then(confidence),
                pl.col(NOVEL)
                .cast(pl.String)
                .str.to_lowercase()
                .str.strip_chars()
                .replace_strict(SPREADSHEET_BOOLEANS, default=None),
            ]
            if suggested
            else [pl.lit(None, pl.String), pl.lit(None, pl.Float64), pl.lit(None, pl.Boolean)]
        )
        frames.append(
            frame.select(
                pl.lit(source).alias(SOURCE_FILE),
                pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias(SOURCE_ROW),
                # Read as clean reads the ledger's ids, so that it finds its record.
                normalise_text(pl.col(id_column).cast(pl.String), "preserve").alias(_RECORD),
                pl.col(spec.label).cast(pl.String).str.strip_chars(LABEL_TRIM).alias(_ACCOUNT),
                *optional,
                (pl.lit(len(frames), pl.Int64) * 2**40 + pl.int_range(pl.len())).alias(_ORDER),
                pl.lit(whole).alias(_WHOLE),
                pl.lit(kind).alias(_KIND),
                *record,
                pl.lit(suggested).alias(_SUGGESTED),
                *(c.alias(f"_{name}") for c, name in zip(suggestion, _SUGGESTION, strict=True)),
            ).with_columns(pl.col(_RECORD, _ACCOUNT, REVIEWED_AT, REVIEWED_BY).replace("", None))
        )
    return pl.concat(frames) if frames else pl.DataFrame()


def leading_zeros(values: pl.Series, known: pl.Series) -> pl.Series:
    """`values` with each one that is not in `known`, but is one of its values with the leading
    zeros dropped (and no other's), as that value: a spreadsheet reads an id or account such as
    0420 as the number 420, or turns what a person types so, and saves it so. Only the known
    values that fit an unknown one are held: a ledger's ids may be millions."""
    unknown = values.filter(~values.is_in(known.implode())).drop_nulls().unique()
    fits = (
        known.filter(known.str.contains(r"^0\d"))
        .to_frame("padded")
        .with_columns(pl.col("padded").str.replace(r"^0+(\d)", "$1").alias("stripped"))
        .filter(pl.col("stripped").is_in(unknown.implode()))
        .filter(pl.col("stripped").is_unique())
    )
    return values.replace(dict(zip(fits["stripped"], fits["padded"], strict=True)))


def with_leading_zeros(rows: pl.DataFrame, ids: pl.Series, labels: pl.Series) -> pl.DataFrame:
    """The corrections `rows` with the leading zeros a spreadsheet dropped put back
    (`leading_zeros`): in the ids, from the ledger's `ids`, and in the accounts chosen and
    suggested, from the `labels` (data.classes, else the ledger's). Only in the rows of CSV files
    and workbooks: a Parquet file keeps its text as written, and its 420 is another id than 0420."""
    if rows.is_empty():
        return rows
    known = {_RECORD: ids, _ACCOUNT: labels, f"_{PREDICTED_LABEL}": labels}
    typed = rows[_KIND] == PARQUET
    restored = rows.with_columns(
        rows[c].zip_with(typed, leading_zeros(rows[c], values)) for c, values in known.items()
    )
    changed = [(rows[c] != restored[c]).sum() for c in known]
    if any(changed):
        log.info(
            "correct: leading zeros a spreadsheet dropped put back in %d ids, %d accounts chosen "
            "and %d suggested",
            *changed,
        )
    return restored


def new_records(
    rows: pl.DataFrame, spec: DataSpec, options: CleanSettings, first_row: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Corrections that are whole records the ledger lacks, through clean as the ledger went:
    the clean ones (numbered on from `first_row`, the ledger file's last row) and the rejected
    ones with clean's reason."""
    if rows.is_empty():
        return pl.DataFrame(), pl.DataFrame()
    raw = rows.select(
        pl.int_range(1, pl.len() + 1, dtype=pl.UInt32).alias(SOURCE_ROW),
        *(pl.col(f"_{c}").alias(c) for c in record_columns(spec)),
        pl.col(_ACCOUNT).alias(spec.label),
    )
    with tempfile.TemporaryDirectory(prefix="corrections-") as folder:
        work = Path(folder)
        write_parquet(raw.lazy(), work / "records.parquet")
        # Resolved already: the latest correction of each record is all that is left.
        once = dataclasses.replace(options, drop_duplicates=False)
        # Every row has its account (checked above); one that clean refuses is a reject, not
        # the end of the run (as a training file of nothing but rejects would be).
        clean(
            work / "records.parquet",
            spec,
            work / "clean.parquet",
            work / "rejects.parquet",
            once,
            require_label=False,
        )
        cleaned = pl.read_parquet(work / "clean.parquet")
        refused = pl.read_parquet(work / "rejects.parquet")
    numbered = rows.drop(REASON).with_row_index("_index", offset=1)
    added = cleaned.join(
        numbered.select(
            pl.col("_index").cast(cleaned.schema[SOURCE_ROW]).alias(SOURCE_ROW),
            REVIEWED_AT,
            REVIEWED_BY,
        ),
        on=SOURCE_ROW,
        maintain_order="left",
    ).with_columns((pl.col(SOURCE_ROW).cast(pl.Int64) + first_row).alias(SOURCE_ROW))
    rejected = numbered.join(
        refused.select(pl.col(SOURCE_ROW).cast(pl.UInt32).alias("_index"), REASON),
        on="_index",
        maintain_order="left",
    ).drop("_index")
    return added, rejected


def apply_corrections(
    records: Path,
    corrections: list[Path],
    spec: DataSpec,
    options: CleanSettings,
    output: Path,
    rejects: Path,
    track_record: Path,
    *,
    ledger_rows: int,
) -> CorrectionCounts:
    """Write the records of `records` (clean's output) with the corrections applied, the new
    records added and `label_source`, the rows that could not be applied, and the track record;
    return the checked counts. `ledger_rows`: the records of the ledger file (clean's rows in),
    after which the added records are numbered (`source_row`), so that no added record takes
    the number of a ledger row that clean rejected or dropped as a duplicate."""
    if spec.id is None:
        raise DataError("data.corrections needs data.columns.id: a correction names its record")
    ledger = pl.scan_parquet(records)
    known = ledger.select(pl.col(spec.id).cast(pl.String).unique()).collect().to_series()
    labels = (
        pl.Series(spec.classes, dtype=pl.String)
        if spec.classes is not None
        else ledger.select(pl.col(spec.label).cast(pl.String).unique().drop_nulls())
        .collect()
        .to_series()
    )
    rows = with_leading_zeros(read_corrections(corrections, spec), known, labels)
    time = pl.col(REVIEWED_AT).map_elements(review_time, return_dtype=pl.Datetime("us", "UTC"))
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
            pl.col(_RECORD).is_not_null()
            & ~pl.col(_RECORD).is_in(known.implode())
            & ~pl.col(_WHOLE),
            pl.format(
                "no record with id '{}' in the ledger, and the file lacks a record's columns",
                pl.col(_RECORD),
            ),
        ),
        (
            # Not a new record: two ids rounded to one text would be one record, the real one
            # keeping its old account.
            (pl.col(_KIND) == CSV)
            & pl.col(_RECORD).str.contains(ROUNDED_NUMBER)
            & ~pl.col(_RECORD).is_in(known.implode()),
            pl.format(
                "id '{}' is a number a spreadsheet rounded, not the ledger's id: save the review"
                " file as a workbook (predict.review_format: xlsx) or keep the id column as text",
                pl.col(_RECORD),
            ),
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
        .with_columns(pl.format(f"{SUPERSEDED} {{}}", "_winner").alias(REASON))
    )
    fresh = latest.filter(~pl.col(_RECORD).is_in(known.implode()))
    latest = latest.filter(pl.col(_RECORD).is_in(known.implode()))
    added, refused = new_records(fresh, spec, options, ledger_rows)
    rejected = pl.concat(
        [
            checked.filter(pl.col(REASON).is_not_null()),
            superseded.drop("_winner"),
            *([refused] if refused.height else []),
        ],
        how="diagonal_relaxed",
    )

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
    used = pl.concat(
        [
            latest,
            fresh.join(refused.select(_RECORD), on=_RECORD, how="anti")
            if refused.height
            else fresh,
        ]
    )
    readable = pl.all_horizontal(pl.col(f"_{c}").is_not_null() for c in _SUGGESTION)
    unreadable = used.filter(pl.col(_SUGGESTED) & ~readable).height
    if unreadable:
        log.warning(
            "correct: %d corrections come from files that say what was suggested, but not"
            " readably (%s: an account, a confidence in [0, 1], true or false); they correct"
            " their records and are left out of the track record",
            unreadable,
            ", ".join(_SUGGESTION),
        )
    reviewed = used.filter(readable).select(
        SOURCE_FILE,
        SOURCE_ROW,
        # Named as predict's review file names it, and as the serialized splits do.
        pl.col(_RECORD).alias(ID),
        REVIEWED_AT,
        pl.col(f"_{PREDICTED_LABEL}").alias(PREDICTED_LABEL),
        pl.col(_ACCOUNT).alias(spec.label),
        (pl.col(f"_{PREDICTED_LABEL}") == pl.col(_ACCOUNT)).alias(RIGHT),
        pl.col(f"_{CONFIDENCE}").alias(CONFIDENCE),
        pl.col(f"_{NOVEL}").alias(NOVEL),
    )
    joined = [added.lazy().with_columns(pl.lit(CORRECTION).alias(LABEL_SOURCE))]
    write_parquets(
        {
            output: pl.concat([labelled, *joined[: added.height > 0]], how="diagonal_relaxed"),
            rejects: rejected.select(
                SOURCE_FILE,
                SOURCE_ROW,
                pl.col(_RECORD).alias(spec.id),
                pl.col(_ACCOUNT).alias(spec.label),
                REVIEWED_AT,
                REVIEWED_BY,
                REASON,
            ).lazy(),
            track_record: reviewed.lazy(),
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
        added=added.height,
        superseded=superseded.height,
        rejected=rejected.height,
        track_record=reviewed.height,
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
