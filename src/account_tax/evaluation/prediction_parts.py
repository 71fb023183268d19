"""The `predict` section, and a prediction's parts: each shard writes its predictions, rejects
and rows to review to files of its own, a chunk at a time (`PartWriter`), and `gather_parts` puts
them together, the rows to review least confident first. File work only: the gather job loads no
model.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from account_tax.data.spec import CONFIDENCE
from account_tax.io import parquet_rows, write_parquet, write_spreadsheet_csv
from account_tax.settings import SOURCE_ROW, SectionView

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PredictSettings(SectionView):
    SECTION = "predict"
    # Name -> file of new records, each predicted to results/predict/<name>.parquet.
    inputs: dict[str, str]
    top_k: int
    evidence_k: int
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
    item a line, its numbers to 4 decimals, separated by `separator`. Filled in (the account
    column) and saved as CSV, it is a corrections file as it stands (`data.corrections`)."""
    rows = pl.scan_parquet(review)
    lists = [
        pl.col(name)
        .list.eval((pl.element().round(4) if dtype.inner.is_float() else pl.element()).cast(str))
        .list.join("\n")
        for name, dtype in rows.collect_schema().items()
        if isinstance(dtype, pl.List)
    ]
    write_spreadsheet_csv(rows.with_columns(lists), target, separator)


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
