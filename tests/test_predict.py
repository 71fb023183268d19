"""How `predict` splits an input among shards (whole chunks, every row once, in order), and when
it scores with an ONNX model."""

import json

import pytest

from account_tax.evaluation.predict import chunk_range
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


def test_an_onnx_model_is_used_only_if_its_check_passed(tmp_path, caplog):
    record = {"runtime": "onnx-int8", "top1_agreement": 0.97, "ece_change": 0.02, "passed": False}
    (tmp_path / "check.json").write_text(json.dumps(record))
    assert checked_onnx_model(tmp_path) is None
    assert "failed its check on validation (top-1 agreement 0.9700" in caplog.text
    assert "predicting with PyTorch" in caplog.text
    (tmp_path / "check.json").write_text(json.dumps(record | {"passed": True}))
    assert checked_onnx_model(tmp_path) == tmp_path / "model.onnx"
