"""The `predict` section, and a prediction's parts: each shard writes its predictions, rejects
and rows to review to files of its own, a chunk at a time (`PartWriter`), and `gather_parts` puts
them together, the rows to review least confident first. File work only: the gather job loads no
model.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import xlsxwriter

from account_tax.data.label_map import LabelMap
from account_tax.data.spec import ACCOUNTS_SHEET, CONFIDENCE, REVIEW_SHEET
from account_tax.errors import DataError
from account_tax.io import (
    parquet_rows,
    replace_atomically,
    write_parquet,
    write_spreadsheet_csv,
)
from account_tax.settings import SOURCE_ROW, SectionView

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PredictSettings(SectionView):
    SECTION = "predict"
    # Name -> file of new records, each predicted to results/predict/<name>.parquet.
    inputs: dict[str, str]
    top_k: int
    evidence_k: int
    review_format: str
    review_csv_separator: str
    shards: int
    chunk_rows: int
    runtime: str
    runtime_min_agreement: float
    runtime_max_ece_change: float


PART_FILES = ("predictions", "rejects", "review")
"""The files of a shard's part, in `PredictPaths`' order."""


@dataclass(frozen=True)
class PredictPaths:
    predictions: Path
    rejects: Path
    review: Path


def chunk_range(rows: int, chunk_rows: int, shard: int, shards: int) -> range:
    """The first rows of the chunks (`chunk_rows` each) that shard `shard` of `shards` predicts:
    consecutive chunks, as even a share as whole chunks allow. A shard ends where a chunk ends,
    so that every shard's batches, and thus its values to the last digit, are the unsharded
    run's."""
    chunks = -(-rows // chunk_rows)
    first, last = shard * chunks // shards, (shard + 1) * chunks // shards
    return range(first * chunk_rows, last * chunk_rows, chunk_rows)


class PartWriter:
    """Frames appended to one Parquet file as they come (a row group each), so that no more than
    a chunk is held; the first frame's schema is the file's."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.writer = path, None

    def write(self, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema, compression="zstd")
        self.writer.write_table(table.cast(self.writer.schema))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


FANOUT = 16
"""Buckets the rows to review are spread over at once (files open at once). Each write to a
bucket is a Parquet row group whose statistics stay in memory until the file closes, so a few
buckets written in large pieces, spread again where they are too large, hold less than many
buckets written in small ones (bench/README)."""


def review_order(rows: pl.DataFrame) -> np.ndarray:
    """Each row's (confidence, source row) as one unsigned integer that orders as the pair does:
    the bits of a non-negative float32 order as its values."""
    confidence = rows[CONFIDENCE].cast(pl.Float32).to_numpy().view(np.uint32).astype(np.uint64)
    return (confidence << np.uint64(32)) | rows[SOURCE_ROW].cast(pl.UInt64).to_numpy()


def write_least_confident_first(sources: list[Path], target: Path, bucket_rows: int) -> None:
    """The rows of `sources`, least confident first (ties in row order), to `target`, holding
    about `bucket_rows` rows at a time and one integer per row. Rows to review can be a quarter
    of a ledger's, and sorting them at once held them all (2.4 GB for 1.3 million, bench/README)."""
    keys = np.sort(review_order(pl.scan_parquet(sources).select(CONFIDENCE, SOURCE_ROW).collect()))
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as work:
        ordered = PartWriter(Path(work) / "ordered.parquet")
        try:
            append_in_review_order(sources, keys, Path(work), bucket_rows, ordered)
        finally:
            ordered.close()
        os.replace(ordered.path, target)


def append_in_review_order(
    sources: list[Path], keys: np.ndarray, work: Path, bucket_rows: int, ordered: PartWriter
) -> None:
    """Append the rows of `sources`, whose sorted `review_order` keys are `keys`, to `ordered` in
    that order: up to `bucket_rows` rows sorted at once; more spread over up to `FANOUT` buckets
    of consecutive keys, read `bucket_rows` at a time, and each bucket appended in turn. Rows
    with one key (the same confidence and row) are not told apart: they are appended at once."""
    if len(keys) <= bucket_rows or keys[0] == keys[-1]:
        ordered.write(pl.read_parquet(sources).sort(CONFIDENCE, SOURCE_ROW))
        return
    step = -(-len(keys) // min(FANOUT, -(-len(keys) // bucket_rows)))
    # The first key of each bucket after the first; above the smallest key, so that every bucket
    # holds fewer rows than the sources.
    bounds = np.unique(keys[step::step])
    bounds = bounds[bounds > keys[0]] if (bounds > keys[0]).any() else keys[keys > keys[0]][:1]
    with tempfile.TemporaryDirectory(dir=work) as folder:
        buckets = [
            PartWriter(Path(folder) / f"{index}.parquet") for index in range(len(bounds) + 1)
        ]
        try:
            for source in sources:
                for batch in pq.ParquetFile(source).iter_batches(batch_size=bucket_rows):
                    rows = pl.from_arrow(batch)
                    place = np.searchsorted(bounds, review_order(rows), "right")
                    for (index,), bucket in (
                        rows.with_columns(_bucket=place)
                        .partition_by("_bucket", as_dict=True, include_key=False)
                        .items()
                    ):
                        buckets[index].write(bucket)
        finally:
            for bucket in buckets:
                bucket.close()
        for bucket, bucket_keys in zip(
            buckets, np.split(keys, np.searchsorted(keys, bounds)), strict=True
        ):
            if len(bucket_keys):
                append_in_review_order([bucket.path], bucket_keys, work, bucket_rows, ordered)


def write_review_csv(review: Path, target: Path, separator: str) -> None:
    """The rows to review as a spreadsheet opens them, for the people who review: the review
    file's rows in its order and its columns, each list (the top k, the evidence) one cell with an
    item a line (`one_cell_lists`), separated by `separator`. Filled in (the account column) and
    saved as CSV, it is a corrections file as it stands (`data.corrections`)."""
    rows = pl.scan_parquet(review)
    write_spreadsheet_csv(
        rows.with_columns(one_cell_lists(rows.collect_schema())), target, separator
    )


def one_cell_lists(schema: pl.Schema) -> list[pl.Expr]:
    """Each list column of `schema` as text, an item a line, its numbers to 4 decimals: one cell
    of a spreadsheet."""
    return [
        pl.col(name)
        .list.eval((pl.element().round(4) if dtype.inner.is_float() else pl.element()).cast(str))
        .list.join("\n")
        for name, dtype in schema.items()
        if isinstance(dtype, pl.List)
    ]


EXCEL_ROWS = 1_048_576
"""The rows of a worksheet, its header's among them."""
EXCEL_CELL_CHARACTERS = 32_767
"""The most characters a workbook cell holds."""
# Characters XML 1.0, and so a workbook, cannot hold.
NOT_IN_A_WORKBOOK = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def write_review_workbook(review: Path, target: Path, label_map: Path, batch_rows: int) -> None:
    """The rows to review as an Excel workbook, for the people who review: the review file's rows
    in its order and its columns, each list one cell with an item a line (`one_cell_lists`),
    numbers and true/false as such. Every text is a text cell (never a formula, however it
    starts), and every column of text is formatted as text, the empty account column included:
    an id or account (0420, an id of 20 digits), a date or an amount stays as written whatever
    the locale, and what a person types there stays as typed. The account column offers the
    model's accounts that take postings, listed with their names on a sheet of their own
    (`accounts`), and warns of any other. Rows beyond a sheet's go on in `review 2` and so on.
    Filled in and saved, it is a corrections file as it stands (`data.corrections`)."""
    mapping = LabelMap.read(label_map)
    accounts = [
        (code, name, description)
        for code, name, description, postable in zip(
            mapping.labels, mapping.names, mapping.descriptions, mapping.postable, strict=True
        )
        if postable
    ]
    schema = pl.read_parquet_schema(review)
    text = [
        name == mapping.label_column or dtype == pl.String or isinstance(dtype, pl.List)
        for name, dtype in schema.items()
    ]
    columns = list(schema)
    label = columns.index(mapping.label_column) if mapping.label_column in columns else None
    total, per_sheet = parquet_rows(review), EXCEL_ROWS - 1

    def write(path: Path) -> None:
        # A row at a time to the file: memory stays flat however many rows there are.
        workbook = xlsxwriter.Workbook(path, {"constant_memory": True, "nan_inf_to_errors": True})
        formats = {
            "text": workbook.add_format({"num_format": "@"}),
            "lines": workbook.add_format({"num_format": "@", "text_wrap": True, "valign": "top"}),
            "header": workbook.add_format({"bold": True}),
        }
        sizes = [min(per_sheet, total - first) for first in range(0, max(total, 1), per_sheet)]
        sheets = (
            _review_sheet(workbook, schema, text, formats, number, rows, label, len(accounts))
            for number, rows in enumerate(sizes, start=1)
        )
        sheet, row, written = next(sheets), 0, 0
        for batch in pq.ParquetFile(review).iter_batches(batch_size=batch_rows):
            for values in pl.from_arrow(batch).with_columns(one_cell_lists(schema)).iter_rows():
                if row == per_sheet:
                    sheet, row = next(sheets), 0
                row, written = row + 1, written + 1
                for column, value in enumerate(values):
                    if isinstance(value, str) and len(value) > EXCEL_CELL_CHARACTERS:
                        # A workbook would cut it, and the cut text come back as the record's.
                        raise DataError(
                            f"{review}: row {written}, column {columns[column]!r} holds"
                            f" {len(value):,} characters, more than a workbook cell takes"
                            f" ({EXCEL_CELL_CHARACTERS:,}): set predict.review_format: csv"
                        )
                    _write_cell(sheet, row, column, value, formats)
        listed = workbook.add_worksheet(ACCOUNTS_SHEET)
        listed.set_column(0, 2, 30, formats["text"])
        for column, name in enumerate((mapping.label_column, "name", "description")):
            listed.write_string(0, column, name, formats["header"])
        for row, values in enumerate(accounts, start=1):
            for column, value in enumerate(values):
                _write_cell(listed, row, column, value, formats)
        workbook.close()

    replace_atomically([target], lambda tmps: write(tmps[0]))


def _review_sheet(
    workbook: Any,
    schema: pl.Schema,
    text: list[bool],
    formats: dict[str, Any],
    number: int,
    rows: int,
    label: int | None,
    accounts: int,
) -> Any:
    """The `number`th sheet of `rows` rows to review: the header bold and frozen, a filter on
    each column, the columns of text formatted as text, and the account column (the `label`th)
    offering the first `accounts` rows of the accounts sheet."""
    sheet = workbook.add_worksheet(REVIEW_SHEET if number == 1 else f"{REVIEW_SHEET} {number}")
    for column, ((name, dtype), as_text) in enumerate(zip(schema.items(), text, strict=True)):
        width = 40 if isinstance(dtype, pl.List) else min(40, max(10, len(name) + 2))
        sheet.set_column(column, column, width, formats["text"] if as_text else None)
    sheet.freeze_panes(1, 0)
    sheet.autofilter(0, 0, rows, len(schema) - 1)
    for column, name in enumerate(schema):
        sheet.write_string(0, column, name, formats["header"])
    if label is not None:
        sheet.data_validation(
            1,
            label,
            max(rows, 1),
            label,
            {
                "validate": "list",
                "source": f"={ACCOUNTS_SHEET}!$A$2:$A${accounts + 1}",
                "error_type": "warning",
                "error_title": "Not an account of the model",
                "error_message": f"Not one of the accounts on the sheet '{ACCOUNTS_SHEET}'.",
            },
        )
    return sheet


def _write_cell(sheet: Any, row: int, column: int, value: object, formats: dict[str, Any]) -> None:
    """`value` as what it is: text (each control character a workbook cannot hold written as a
    space, which clean collapses with the blanks beside it: a replacement character would make
    the reviewed row a reject), a number or true/false; nothing for none."""
    if isinstance(value, str):
        value = NOT_IN_A_WORKBOOK.sub(" ", value)
        sheet.write_string(row, column, value, formats["lines" if "\n" in value else "text"])
    elif isinstance(value, bool):
        sheet.write_boolean(row, column, value)
    elif isinstance(value, int | float):
        sheet.write_number(row, column, value)
    elif value is not None:
        sheet.write_string(row, column, str(value), formats["text"])


def gather_parts(
    parts: list[PredictPaths], records: Path, paths: PredictPaths, chunk_rows: int
) -> dict[str, int]:
    """The parts' predictions and rejects, one after the other, to `paths`; their rows to review,
    least confident first (ties in row order), to `paths.review`, sorted `chunk_rows` at a time;
    return the counts, checked against ingest's rows in `records`."""
    for target, sources in zip(
        dataclasses.astuple(paths), zip(*map(dataclasses.astuple, parts), strict=True), strict=True
    ):
        if target == paths.review:
            write_least_confident_first(list(sources), target, chunk_rows)
        else:
            write_parquet(pl.scan_parquet(list(sources)), target)
    counts = {
        "rows_in": parquet_rows(records),
        "predicted": parquet_rows(paths.predictions),
        "review": parquet_rows(paths.review),
        "rejected": parquet_rows(paths.rejects),
    }
    counts["auto"] = counts["predicted"] - counts["review"]
    if counts["rows_in"] != counts["predicted"] + counts["rejected"]:
        raise AssertionError(f"predict lost rows: {counts}")
    log.info("predict: %s", counts)
    return counts
