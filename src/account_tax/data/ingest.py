"""Ingest: any supported raw table to `records.parquet`, with the source row of every record.

Values keep their raw form (CSV cells stay text) so that `clean` can reject what does not parse
and the rejects file shows what was actually in the source. A CSV is read by polars; one that
polars cannot read record for record (a record with too many or too few fields, an unclosed quote)
is read again by Python's strict csv module, and each malformed record becomes a row with its
problem in RECORD_PROBLEM, which `clean` turns into the reason it is rejected.
"""

from __future__ import annotations

import csv
import json
import logging
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, closing
from pathlib import Path
from typing import BinaryIO

import polars as pl

from account_tax.data.spec import DataSpec
from account_tax.errors import DataError
from account_tax.io import (
    as_utf8,
    duplicated_columns,
    refuse_duplicates,
    require_columns,
    resolve_input,
    write_parquet,
)
from account_tax.settings import SOURCE_ROW

log = logging.getLogger(__name__)

SOURCE_FILE_KEY = "account_tax.source_file"
"""Key in the footer of ingest's output: the raw file its rows come from (as given to ingest)."""
RECORD_PROBLEM = "source_problem"
"""Column of ingest's output where the CSV had malformed records: the problem of each, with its
line number (null for a well-formed record). Absent when every record was well-formed."""

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


def source_format(spec: DataSpec, path: Path) -> str:
    """`spec`'s format, or the one the file's extension names when it is `auto`."""
    if spec.format != "auto":
        return spec.format
    # JSON means the bundled US-GAAP mapping: the only JSON layout the workflow reads.
    fmt = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "edgar_gaap"}.get(
        path.suffix.lower()
    )
    if fmt is None:
        raise DataError(f"{path}: cannot tell the format from the extension; set data.format")
    return fmt


def scan_csv(path: Path, spec: DataSpec) -> pl.LazyFrame:
    # All cells as text, invalid UTF-8 replaced by U+FFFD: clean rejects those rows by name.
    return pl.scan_csv(
        path,
        separator=spec.csv_separator,
        infer_schema=False,
        null_values=list(spec.null_values),
        encoding="utf8-lossy",
    )


def scan_table(path: Path, fmt: str) -> pl.LazyFrame:
    """A lazy view of a Parquet file or of the US-GAAP mapping."""
    return read_edgar_gaap(path).lazy() if fmt == "edgar_gaap" else pl.scan_parquet(path)


class PhysicalLines:
    """The lines of a file from a byte offset on, decoded as polars' `utf8-lossy` does (invalid
    UTF-8 becomes U+FFFD), with the offset and number of the next line kept, so that reading can
    start again at any line."""

    def __init__(self, handle: BinaryIO, offset: int = 0, number: int = 1) -> None:
        handle.seek(offset)
        self.handle, self.offset, self.number = handle, offset, number

    def __iter__(self) -> PhysicalLines:
        return self

    def __next__(self) -> str:
        line = self.handle.readline()
        if not line:
            raise StopIteration
        text = line.decode("utf-8", errors="replace")
        if self.offset == 0:
            text = text.removeprefix("\ufeff")  # a byte order mark, which polars skips too
        self.offset += len(line)
        self.number += 1
        return text


def describe_csv_error(error: csv.Error) -> str:
    """The csv module's complaint in a user's words."""
    message = str(error)
    if message == "unexpected end of data":
        return "unclosed quote"
    if message.startswith("field larger than field limit"):
        return (
            f"unclosed quote (a quoted field runs on for over {csv.field_size_limit()} characters)"
        )
    if message.endswith("expected after '\"'"):
        return "text after a closing quote"
    if message.startswith("new-line character seen in unquoted field"):
        return "a carriage return inside an unquoted field"
    return message


Record = tuple[int, list[str], str | None]
"""A CSV record: the number of its first line, its fields, and its problem (None when none)."""


def csv_records(path: Path, separator: str) -> Iterator[Record]:
    """Every record of a CSV file, header first, as the strict csv module reads them.

    A record it cannot read is given with the fields its first line alone holds (split at the
    separator, quotes and all), and reading goes on from the next line: an unclosed quote costs
    that line, not the rest of the file.
    """
    with path.open("rb") as handle:
        lines = PhysicalLines(handle)
        reader = csv.reader(lines, delimiter=separator, strict=True)
        while True:
            start, number = lines.offset, lines.number
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                lines = PhysicalLines(handle, start, number)
                first = next(lines).rstrip("\r\n")
                reader = csv.reader(lines, delimiter=separator, strict=True)
                yield number, first.split(separator), f"line {number}: {describe_csv_error(error)}"
            else:
                yield number, fields, None


def read_header(records: Iterator[Record], path: Path) -> list[str]:
    """The column names: the first record that is not an empty line (polars skips those too)."""
    for _, fields, problem in records:
        if problem is not None:
            raise DataError(f"{path}: the header cannot be read: {problem}")
        if fields:
            # polars would rename the second of two columns of one name.
            refuse_duplicates(fields, path)
            return fields
    raise DataError(f"{path}: input file has no header and no rows")


def fields_per_line_agree(path: Path, spec: DataSpec, header: Sequence[str]) -> bool:
    """Whether every line of a CSV has as many fields as the header, counting separators outside
    quoted "..." parts; empty lines (records with every value missing) pass."""
    lines = pl.scan_csv(
        path,
        has_header=False,
        separator="\x00",  # never in a text file: each line is one value
        quote_char=None,
        schema={"line": pl.String},
        encoding="utf8-lossy",
        truncate_ragged_lines=True,
    )
    outside_quotes = pl.col("line").str.replace_all(r'"[^"]*"', "")
    separators = outside_quotes.str.count_matches(spec.csv_separator, literal=True)
    wrong = lines.select((separators != len(header) - 1).any()).collect(engine="streaming")
    return not wrong.item()


def no_record_is_short(
    path: Path, spec: DataSpec, header: Sequence[str], wanted: Sequence[str], written: Path
) -> bool:
    """Whether polars, which pads a record with too few fields with nulls instead of failing, read
    none such. Only a null in the last column can mean one; when that column was written and has
    no nulls, the lines need not be read again."""
    last = header[-1]
    if last in wanted:
        nulls = pl.scan_parquet(written).select(pl.col(last).null_count()).collect().item()
        if nulls == 0:
            return True
    return fields_per_line_agree(path, spec, header)


def rewrite_csv(
    path: Path, spec: DataSpec, header: Sequence[str], wanted: Sequence[str], target: Path
) -> int:
    """Write the `wanted` columns of every record of `path` to a well-formed CSV `target`, with
    RECORD_PROBLEM; return the number of malformed records.

    A malformed record keeps the values its fields give, in order (missing ones empty).
    """
    positions = [header.index(column) for column in wanted]
    malformed = 0
    with (
        closing(csv_records(path, spec.csv_separator)) as records,
        target.open("w", encoding="utf-8", newline="") as handle,
    ):
        read_header(records, path)
        writer = csv.writer(handle, delimiter=spec.csv_separator, lineterminator="\n")
        writer.writerow([*wanted, RECORD_PROBLEM])
        for number, fields, problem in records:
            # An empty line is a record with every value missing, as polars reads it.
            if problem is None and fields and len(fields) != len(header):
                plural = "s" if len(fields) != 1 else ""
                problem = f"line {number}: {len(fields)} field{plural}, expected {len(header)}"
            values = fields + [""] * (len(header) - len(fields))
            writer.writerow([*(values[i] for i in positions), problem or ""])
            malformed += problem is not None
    return malformed


def write_csv_records(
    path: Path,
    spec: DataSpec,
    header: Sequence[str],
    wanted: Sequence[str],
    output: Path,
    metadata: dict[str, str],
) -> None:
    """The `wanted` columns of a CSV (UTF-8, see `io.as_utf8`), with `source_row`, to `output`:
    read by polars' streaming scan; read by the csv module when polars cannot read the file
    record for record. The log names the file `metadata` does: the user's, not a UTF-8 copy."""
    source = metadata[SOURCE_FILE_KEY]
    frame = scan_csv(path, spec)
    try:
        # A header that polars reads otherwise than the csv module (quotes in it, say) means
        # that it would read the records otherwise too.
        whole = frame.collect_schema().names() == header
        if whole:
            write_parquet(
                frame.select(wanted).with_row_index(SOURCE_ROW, offset=1), output, metadata=metadata
            )
            whole = no_record_is_short(path, spec, header, wanted, output)
    except pl.exceptions.ComputeError as error:
        log.info("%s: polars cannot read it (%s)", source, str(error).partition("\n")[0])
        whole = False
    if whole:
        return
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.") as work:
        rewritten = Path(work) / "records.csv"
        malformed = rewrite_csv(path, spec, header, wanted, rewritten)
        frame = scan_csv(rewritten, spec).with_row_index(SOURCE_ROW, offset=1)
        write_parquet(frame, output, metadata=metadata)
    log.warning(
        "%s: %d malformed record(s), each a row with its problem (clean rejects them)",
        source,
        malformed,
    )


def table_columns(frame: pl.LazyFrame, path: Path) -> list[str]:
    """The column names of `scan_table`'s view."""
    try:
        return frame.collect_schema().names()
    except pl.exceptions.DuplicateError as error:
        # Polars names the first repeated column in its message, and reads no further.
        repeated = re.findall(r"column with name '(.*)' has more than one occurrence", str(error))
        if repeated:
            raise duplicated_columns(path, repeated) from error
        raise DataError(f"{path}: {error}") from error


def ingest(
    spec: DataSpec, output: Path, source: Path | None = None, *, require_label: bool = True
) -> int:
    """Write the columns the config names, plus `source_row`, to `output`; return the row count.

    `source` defaults to the config's `data.path`; the workflow passes the resolved file so that
    the stage also runs in an environment without the package that ships the default data.
    New records to predict need no label column (`require_label=False`). The output's footer
    names `source` (SOURCE_FILE_KEY), for the rejects file of `clean`.
    """
    path = source if source is not None else resolve_input(spec.path)
    if not path.is_file():
        raise DataError(f"{path}: input file does not exist")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: input file is empty")
    fmt = source_format(spec, path)
    # The output's folder also holds a UTF-8 copy (io.as_utf8) or a rewritten CSV for a while.
    output.parent.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        if fmt == "csv":
            text = stack.enter_context(as_utf8(path, spec.encoding, output.parent))
            with closing(csv_records(text, spec.csv_separator)) as records:
                available = read_header(records, path)
        else:
            frame = scan_table(path, fmt)
            available = table_columns(frame, path)
        wanted = [c for c in spec.columns if require_label or c != spec.label or c in available]
        require_columns(available, wanted, path)
        metadata = {SOURCE_FILE_KEY: str(path)}
        if fmt == "csv":
            write_csv_records(text, spec, available, wanted, output, metadata)
        else:
            write_parquet(
                frame.select(wanted).with_row_index(SOURCE_ROW, offset=1),
                output,
                metadata=metadata,
            )
    rows = pl.scan_parquet(output).select(pl.len()).collect().item()
    if rows == 0:
        output.unlink()
        raise DataError(f"{path}: input file has a header but no data rows")
    log.info("ingest: %d rows from %s -> %s", rows, path, output)
    return rows
