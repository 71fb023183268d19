"""How `predict` splits an input among shards: whole chunks, every row once, in order."""

import pytest

from account_tax.evaluation.predict import chunk_range


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
