"""How `predict` splits an input among shards (whole chunks, every row once, in order), how it
orders the rows to review without holding them all, and when it scores with an ONNX model."""

import json

import numpy as np
import polars as pl
import pytest

from account_tax.evaluation.prediction_parts import (
    PartWriter,
    chunk_range,
    write_least_confident_first,
)
from account_tax.evaluation.runtime_check import checked_onnx_model


@pytest.mark.parametrize(
    ("rows", "chunk_rows", "shards"), [(1, 8, 1), (17, 4, 2), (17, 4, 5), (17, 4, 9), (8192, 8, 7)]
)
def test_shards_cover_every_row_once_in_whole_chunks(rows, chunk_rows, shards):
    ranges = [chunk_range(rows, chunk_rows, shard, shards) for shard in range(shards)]
    starts = [start for shard in ranges for start in shard]
    assert starts == list(range(0, rows, chunk_rows))
    sizes = [len(shard) for shard in ranges]
    assert max(sizes) - min(sizes) <= 1
    assert all(shard.start % chunk_rows == 0 for shard in ranges)


def test_more_shards_than_chunks_leaves_shards_empty():
    ranges = [chunk_range(10, 4, shard, 5) for shard in range(5)]
    assert [len(shard) for shard in ranges] == [0, 1, 0, 1, 1]


@pytest.mark.parametrize("bucket_rows", [1, 7, 50, 1000])
def test_rows_to_review_are_ordered_least_confident_first_a_bucket_at_a_time(tmp_path, bucket_rows):
    """Rows of two shards' parts (row groups of 30), with ties in confidence (10 values over 300
    rows) and copies of a whole key: in order of confidence, then row, whatever the bucket size,
    every column kept."""
    rng = np.random.default_rng(0)
    rows = pl.DataFrame(
        {
            "source_row": pl.Series(rng.permutation(np.arange(1, 301) % 290 + 1), dtype=pl.UInt32),
            "confidence": pl.Series(rng.integers(0, 10, 300) / 10, dtype=pl.Float32),
            "top_k_labels": [[str(i), "x"] for i in range(300)],
        }
    ).with_columns(pl.col("source_row").cast(pl.String).alias("id"))
    sources = []
    for shard, part in enumerate((rows.head(120), rows.tail(180))):
        writer = PartWriter(tmp_path / f"{shard}.parquet")
        for start in range(0, part.height, 30):
            writer.write(part.slice(start, 30))
        writer.close()
        sources.append(writer.path)
    target = tmp_path / "review.parquet"
    write_least_confident_first(sources, target, bucket_rows)
    ordered = pl.read_parquet(target)
    expected = rows.sort("confidence", "source_row")
    assert ordered.select("confidence", "source_row").equals(
        expected.select("confidence", "source_row")
    )
    # Rows whose whole key is the same may come in either order, each row whole.
    assert ordered.sort("confidence", "source_row", "id").equals(
        expected.sort("confidence", "source_row", "id")
    )
    assert not list(tmp_path.glob(".review.parquet.*"))


def test_rows_with_one_key_end_the_spreading(tmp_path):
    """Thirty copies of one row (one confidence, one source row) and one more confident row:
    buckets of two rows cannot part the copies, which are appended together."""
    rows = pl.DataFrame(
        {
            "source_row": pl.Series([1] * 30 + [2], dtype=pl.UInt32),
            "confidence": pl.Series([0.5] * 30 + [0.25], dtype=pl.Float32),
        }
    )
    writer = PartWriter(tmp_path / "0.parquet")
    writer.write(rows)
    writer.close()
    write_least_confident_first([writer.path], tmp_path / "review.parquet", 2)
    assert pl.read_parquet(tmp_path / "review.parquet").equals(rows.sort("confidence"))


def test_no_rows_to_review_give_an_empty_file_with_every_column(tmp_path):
    writer = PartWriter(tmp_path / "0.parquet")
    writer.write(pl.DataFrame(schema={"source_row": pl.UInt32, "confidence": pl.Float32}))
    writer.close()
    write_least_confident_first([writer.path], tmp_path / "review.parquet", 8)
    assert pl.read_parquet(tmp_path / "review.parquet").schema == {
        "source_row": pl.UInt32,
        "confidence": pl.Float32,
    }


def test_an_onnx_model_is_used_only_if_its_check_passed(tmp_path, caplog):
    record = {
        "runtime": "onnx-int8",
        "rows": 40,
        "top1_agreement": 0.97,
        "ece_change": 0.02,
        "passed": False,
    }
    (tmp_path / "check.json").write_text(json.dumps(record))
    assert checked_onnx_model(tmp_path) is None
    assert "failed its check on validation (top-1 agreement 0.9700" in caplog.text
    assert "predicting with PyTorch" in caplog.text
    (tmp_path / "check.json").write_text(json.dumps(record | {"passed": True}))
    assert checked_onnx_model(tmp_path) == tmp_path / "model.onnx"
    # No validation rows (split.validation_fraction 0): nothing checked it, so PyTorch predicts.
    unchecked = {"runtime": "onnx", "rows": 0, "passed": False}
    (tmp_path / "check.json").write_text(json.dumps(unchecked))
    assert checked_onnx_model(tmp_path) is None
    assert "no validation rows checked the onnx model: predicting with PyTorch" in caplog.text
