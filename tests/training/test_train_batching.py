import itertools
import threading

import numpy as np
import polars as pl
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from account_tax.errors import DataError
from account_tax.training.batching import (
    MAX_PADDING,
    DataLoaderStalled,
    TokenizedSplit,
    epoch_batches,
    evaluation_batches,
    length_batches,
    make_loader,
    rank_batches,
    watched,
)
from account_tax.training.model import load_tokenizer
from account_tax.training.settings import DataLoaderSettings

# Skewed: most rows short, a few long, as accounting memos are.
LENGTHS = np.array([5 + (i % 7) if i % 10 else 60 + i % 13 for i in range(500)])


def padding(batches, lengths):
    return sum(len(b) * lengths[b].max() - lengths[b].sum() for b in batches)


@pytest.mark.parametrize("group_by_length", [True, False])
def test_epoch_batches_are_deterministic_and_hold_every_row_once(group_by_length):
    first = epoch_batches(LENGTHS, 16, seed=7, epoch=1, group_by_length=group_by_length)
    assert first == epoch_batches(LENGTHS, 16, seed=7, epoch=1, group_by_length=group_by_length)
    assert first != epoch_batches(LENGTHS, 16, seed=7, epoch=2, group_by_length=group_by_length)
    assert first != epoch_batches(LENGTHS, 16, seed=8, epoch=1, group_by_length=group_by_length)
    assert sorted(i for batch in first for i in batch) == list(range(len(LENGTHS)))


def test_length_grouping_cuts_padding_and_puts_the_longest_batch_first():
    grouped = epoch_batches(LENGTHS, 16, seed=7, epoch=0, group_by_length=True)
    shuffled = epoch_batches(LENGTHS, 16, seed=7, epoch=0, group_by_length=False)
    assert padding(grouped, LENGTHS) < padding(shuffled, LENGTHS) / 4
    assert LENGTHS[grouped[0]].max() == LENGTHS.max()


def test_ranks_get_equal_whole_steps_and_together_every_batch():
    batches = [[i] for i in range(23)]
    shares = [rank_batches(batches, world_size=2, rank=r, accumulation=3) for r in range(2)]
    assert [len(s) for s in shares] == [12, 12]  # 23 batches -> 4 steps of 3 on each rank
    assert {b[0] for share in shares for b in share} == set(range(23))


def test_evaluation_counts_every_row_once_with_equal_batches_per_rank():
    world = 3
    shares = [evaluation_batches(LENGTHS[:70], 8, world, rank) for rank in range(world)]
    assert len({len(batches) for batches, _ in shares}) == 1
    counted = [i for batches, real in shares for batch in batches[:real] for i in batch]
    assert sorted(counted) == list(range(70))


def test_batches_are_padded_to_their_longest_row(tiny_bert):
    tokenizer = load_tokenizer(tiny_bert)
    texts = ["rent", "vendor: staples | memo: printer paper and toner | amount: 12", "taxi"]
    ids = tokenizer(texts)["input_ids"]
    split = TokenizedSplit(ids, np.array([0, 1, 2]))
    loader = make_loader(split, [[0, 2], [1]], tokenizer, DataLoaderSettings.of())
    short, long = list(loader)
    assert short["input_ids"].shape == (2, max(len(ids[0]), len(ids[2])))
    assert long["input_ids"].shape == (1, len(ids[1]))
    assert short["attention_mask"].sum().item() == len(ids[0]) + len(ids[2])
    assert short["labels"].tolist() == [0, 2]


def test_a_split_with_an_unknown_label_id_is_rejected(tiny_bert, tmp_path):
    path = tmp_path / "train.parquet"
    schema = {"id": pl.String, "text": pl.String, "label_id": pl.Int32}
    pl.DataFrame(
        {"id": ["a", "b"], "text": ["rent", None], "label_id": [1, 5]}, schema
    ).write_parquet(path)
    expected = r"train.parquet: 1 row\(s\) with a label id .* outside .* 0\.\.4, e.g. 'b' \(5\)"
    with pytest.raises(DataError, match=expected):
        TokenizedSplit.read(path, load_tokenizer(tiny_bert), 16, num_labels=5)


class StopsAfter(Dataset):
    """Rows 0..n-1 at once; then it blocks, as a worker stuck on a lock or a dead file system."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return 100

    def __getitem__(self, index: int) -> torch.Tensor:
        if index >= self.n:
            threading.Event().wait()
        return torch.tensor([index])


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_loader_that_stops_producing_ends_in_a_clear_error_in_time(num_workers):
    settings = DataLoaderSettings.of(
        num_workers=num_workers, timeout_s=1.0, first_batch_timeout_s=3
    )
    loader = DataLoader(StopsAfter(3), batch_size=1, num_workers=num_workers, timeout=0)
    received = []
    with pytest.raises(DataLoaderStalled, match=r"no batch 4 after 1 s.*num_workers: 0"):
        for batch in watched(loader, settings, "training"):
            received.append(batch)
    assert len(received) == 3


class StuckSplit(TokenizedSplit):
    def __getitem__(self, index: int) -> dict[str, object]:
        threading.Event().wait()
        return super().__getitem__(index)


def test_a_first_batch_that_never_comes_fails_within_its_own_limit(tiny_bert):
    """With a worker, the loader's own timeout is the same limit: either way, the same error."""
    settings = DataLoaderSettings.of(num_workers=1, timeout_s=0.5, first_batch_timeout_s=1.5)
    split = StuckSplit([[1, 2]] * 4, np.zeros(4, dtype=np.int64))
    loader = make_loader(split, [[0, 1], [2, 3]], load_tokenizer(tiny_bert), settings)
    with pytest.raises(DataLoaderStalled, match=r"validation data: no first batch after 1\.5 s"):
        list(watched(loader, settings, "validation"))


def test_an_error_in_the_loader_reaches_the_caller():
    class Broken(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            raise ValueError(f"bad row {index}")

    with pytest.raises(ValueError, match="bad row 0"):
        list(watched(DataLoader(Broken(), batch_size=2), DataLoaderSettings.of(), "training"))


def test_length_batches_keep_near_equal_lengths_together():
    rng = np.random.default_rng(3)
    lengths = rng.integers(9, 75, size=100).tolist()
    batches = length_batches(lengths, batch_size=64)
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(100))
    # Longest first, ties in row order: the order a chunk's shards and a served request share.
    assert rows.tolist() == sorted(range(100), key=lambda row: (-lengths[row], row))
    for batch in batches:
        longest, shortest = lengths[batch[0]], lengths[batch[-1]]
        assert len(batch) <= 64 and shortest >= (1 - MAX_PADDING) * longest
    # A batch closes only when full or before a row too short for it.
    for batch, following in itertools.pairwise(batches):
        too_short = lengths[following[0]] < (1 - MAX_PADDING) * lengths[batch[0]]
        assert len(batch) == 64 or too_short
    padded = sum(len(batch) * lengths[batch[0]] for batch in batches)
    fixed = sum(len(rows[start : start + 64]) * lengths[rows[start]] for start in range(0, 100, 64))
    assert padded < 0.9 * fixed


def test_length_batches_of_equal_lengths_are_full():
    batches = length_batches([30] * 150, batch_size=64)
    assert [len(batch) for batch in batches] == [64, 64, 22]
    assert length_batches([], batch_size=64) == []
