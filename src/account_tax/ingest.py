"""Ingest: any supported raw table to `records.parquet`, with the source row of every record.

Values keep their raw form (CSV cells stay text) so that `clean` can reject what does not parse
and the rejects file shows what was actually in the source.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import polars as pl

from account_tax.errors import DataError
from account_tax.io import require_columns, resolve_input, write_parquet
from account_tax.settings import SOURCE_ROW, DataSpec

log = logging.getLogger(__name__)

EDGAR_LABEL = "label"
EDGAR_CONCEPT_WORDS = "concept_words"


def camel_to_words(column: pl.Expr) -> pl.Expr:
    """`AccountsPayableCurrent` -> `Accounts Payable Current`; acronyms stay whole."""
    return column.str.replace_all(r"([a-z0-9])([A-Z])", "$1 $2").str.replace_all(
        r"([A-Z]+)([A-Z][a-z])", "$1 $2"
    )


def read_edgar_gaap(path: Path) -> pl.DataFrame:
    """The edgartools US-GAAP mapping: one row per XBRL concept, label = its first standard tag.

    Entries whose key starts with `_` are file metadata, not concepts. The `section` field is
    left out because it gives the label away.
    """
    with path.open(encoding="utf-8") as handle:
        mapping = json.load(handle)
    concepts = {name: entry for name, entry in mapping.items() if not name.startswith("_")}
    log.info(
        "%s: %d concepts (%d metadata entries skipped)",
        path,
        len(concepts),
        len(mapping) - len(concepts),
    )
    rows = {
        "concept": list(concepts),
        EDGAR_LABEL: [(entry.get("standard_tags") or [None])[0] for entry in concepts.values()],
        "display_name": [entry.get("display_name") for entry in concepts.values()],
        "statement": [entry.get("statement") for entry in concepts.values()],
        "company_count": [entry.get("company_count") for entry in concepts.values()],
        "occurrence_rate": [entry.get("occurrence_rate") for entry in concepts.values()],
        "first_year": [entry.get("first_year") for entry in concepts.values()],
        "last_year": [entry.get("last_year") for entry in concepts.values()],
    }
    schema = {
        "concept": pl.String,
        EDGAR_LABEL: pl.String,
        "display_name": pl.String,
        "statement": pl.String,
        "company_count": pl.Int64,
        "occurrence_rate": pl.Float64,
        "first_year": pl.Int64,
        "last_year": pl.Int64,
    }
    frame = pl.DataFrame(rows, schema=schema)
    return frame.with_columns(
        camel_to_words(pl.col("concept").str.replace_all("_", " ")).alias(EDGAR_CONCEPT_WORDS),
        camel_to_words(pl.col("statement")),
    )


def scan_source(spec: DataSpec, path: Path) -> pl.LazyFrame:
    """A lazy view of the raw table at `path` (in `spec`'s format) with `source_row` added."""
    if not path.is_file():
        raise DataError(f"{path}: input file does not exist")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: input file is empty")
    fmt = spec.format
    if fmt == "auto":
        # JSON means the bundled US-GAAP mapping: the only JSON layout the workflow reads.
        fmt = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "edgar_gaap"}.get(
            path.suffix.lower()
        )
        if fmt is None:
            raise DataError(f"{path}: cannot tell the format from the extension; set data.format")
    if fmt == "edgar_gaap":
        frame = read_edgar_gaap(path).lazy()
    elif fmt == "parquet":
        frame = pl.scan_parquet(path)
    else:
        # All cells as text, invalid UTF-8 replaced by U+FFFD: clean rejects those rows by name.
        frame = pl.scan_csv(
            path,
            separator=spec.csv_separator,
            infer_schema=False,
            null_values=list(spec.null_values),
            encoding="utf8-lossy",
        )
    return frame.with_row_index(SOURCE_ROW, offset=1)


def ingest(
    spec: DataSpec, output: Path, source: Path | None = None, *, require_label: bool = True
) -> int:
    """Write the columns the config names, plus `source_row`, to `output`; return the row count.

    `source` defaults to the config's `data.path`; the workflow passes the resolved file so that
    the stage also runs in an environment without the package that ships the default data.
    New records to predict need no label column (`require_label=False`).
    """
    path = source if source is not None else resolve_input(spec.path)
    frame = scan_source(spec, path)
    try:
        available = frame.collect_schema().names()
    except pl.exceptions.NoDataError as error:
        raise DataError(f"{path}: input file has no header and no rows") from error
    wanted = [c for c in spec.columns if require_label or c != spec.label or c in available]
    require_columns(available, wanted, path)
    selected = frame.select(SOURCE_ROW, *wanted)
    write_parquet(selected, output)
    rows = pl.scan_parquet(output).select(pl.len()).collect().item()
    if rows == 0:
        output.unlink()
        raise DataError(f"{path}: input file has a header but no data rows")
    log.info("ingest: %d rows from %s -> %s", rows, path, output)
    return rows
