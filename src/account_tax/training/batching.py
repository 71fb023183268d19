"""Data for training: tokenized splits, deterministic batches per rank, and a loader that never
hangs silently.

Every batch is a list of row indices, planned up front from the seed and the epoch alone, so a
resumed run can start in the middle of an epoch by skipping the batches already trained.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Iterator, Sequence
from itertools import cycle, islice
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from account_tax.data.serialize import read_split
from account_tax.training.settings import DataLoaderSettings

SMALLEST_BUCKET = 16
"""The shortest padded length of a compiled step; each next bucket doubles, up to max_length."""
MEGABATCH = 50
"""Length grouping sorts windows of this many batches: little padding, yet a random data order."""


class TokenizedSplit(Dataset):
    """One split, tokenized once up front (fast tokenizers work in batches; workers only pad)."""

    def __init__(self, input_ids: list[list[int]], label_ids: np.ndarray) -> None:
        self.input_ids = input_ids
        self.label_ids = label_ids
        self.lengths = np.array([len(ids) for ids in input_ids])

    @classmethod
    def read(
        cls, path: Path, tokenizer: PreTrainedTokenizerBase, max_length: int, num_labels: int
    ) -> TokenizedSplit:
        return cls.tokenize(read_split(path, num_labels), tokenizer, max_length)

    @classmethod
    def tokenize(
        cls, frame: pl.DataFrame, tokenizer: PreTrainedTokenizerBase, max_length: int
    ) -> TokenizedSplit:
        texts = frame["text"].fill_null("").to_list()
        # A split may be empty (validation_fraction 0); the tokenizer rejects an empty list.
        input_ids = (
            tokenizer(texts, truncation=True, max_length=max_length)["input_ids"] if texts else []
        )
        return cls(input_ids, frame["label_id"].to_numpy().astype(np.int64))

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> dict[str, object]:
        return {"input_ids": self.input_ids[index], "label": int(self.label_ids[index])}


def epoch_batches(
    lengths: np.ndarray, batch_size: int, seed: int, epoch: int, group_by_length: bool
) -> list[list[int]]:
    """All batches of one epoch, the same for the same seed and epoch on every rank and run.

    With length grouping, rows are shuffled, sorted by length within windows of MEGABATCH
    batches, cut into batches, and the batches shuffled; the longest batch goes first, so that an
    out-of-memory error shows at the first step rather than hours in.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    if group_by_length:
        windows = np.split(order, range(batch_size * MEGABATCH, len(order), batch_size * MEGABATCH))
        order = np.concatenate([w[np.argsort(-lengths[w], kind="stable")] for w in windows])
    batches = [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]
    if group_by_length:
        rng.shuffle(batches)
        longest = max(range(len(batches)), key=lambda b: lengths[batches[b]].max())
        batches.insert(0, batches.pop(longest))
    return batches


def micro_batches_per_rank(num_batches: int, world_size: int, accumulation: int) -> int:
    """Equal on every rank (each step is a collective) and a whole number of optimizer steps."""
    return math.ceil(num_batches / (world_size * accumulation)) * accumulation


def rank_batches(
    batches: list[list[int]], world_size: int, rank: int, accumulation: int
) -> list[list[int]]:
    """This rank's share, every `world_size`-th batch; the first batches repeat to fill the last
    step, as DistributedSampler repeats samples."""
    per_rank = micro_batches_per_rank(len(batches), world_size, accumulation)
    padded = list(islice(cycle(batches), per_rank * world_size))
    return padded[rank::world_size]


MAX_PADDING = 0.2
"""A batch takes no text shorter than this share below its longest (see `length_batches`)."""


def length_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Row indices of each batch: the rows sorted longest first (ties in row order), a batch
    closed at `batch_size` rows or before a row more than `MAX_PADDING` shorter than its first.

    Padding is work the model does for nothing: thousands of sorted texts fill whole batches of
    near-equal length anyway, but a served request of 100 texts spans the whole range of lengths,
    and fixed batches of 64 would pad it by a quarter more tokens (bench/README.md, Serving).
    Every scoring without gradients batches this way: inference and the loop's validation.
    """
    lengths = np.asarray(lengths)
    order = np.argsort(-lengths, kind="stable")
    batches, first = [], 0
    for end in range(1, len(order) + 1):
        if (
            end == len(order)
            or end - first == batch_size
            or lengths[order[end]] < (1 - MAX_PADDING) * lengths[order[first]]
        ):
            batches.append(order[first:end])
            first = end
    return batches


def evaluation_batches(
    lengths: np.ndarray, batch_size: int, world_size: int, rank: int
) -> tuple[list[list[int]], int]:
    """This rank's evaluation batches (`length_batches`), and how many of them count.

    Ranks get the same number of batches, because under ZeRO-3 every forward pass is a
    collective; the fillers at the end are computed and not counted.
    """
    batches = [batch.tolist() for batch in length_batches(lengths, batch_size)]
    mine = batches[rank::world_size]
    per_rank = math.ceil(len(batches) / world_size)
    return mine + [batches[0]] * (per_rank - len(mine)), len(mine)


def length_buckets(max_length: int) -> tuple[int, ...]:
    """The padded lengths of a compiled step: powers of two from SMALLEST_BUCKET, and max_length."""
    buckets = []
    length = SMALLEST_BUCKET
    while length < max_length:
        buckets.append(length)
        length *= 2
    return (*buckets, max_length)


class BucketPadding:
    """Pads a batch to the shortest bucket that holds its longest row: a compiled model then meets
    one sequence length per bucket instead of one per batch."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, buckets: tuple[int, ...]) -> None:
        self.buckets = buckets
        self.collators = {
            length: DataCollatorWithPadding(tokenizer, padding="max_length", max_length=length)
            for length in buckets
        }

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        longest = max(len(row["input_ids"]) for row in rows)
        return self.collators[next(b for b in self.buckets if b >= longest)](rows)


def on_device(
    batch: dict[str, torch.Tensor], device: torch.device, compiled: bool
) -> dict[str, torch.Tensor]:
    """The batch on the device; for a compiled model its row count marked dynamic, so that the
    last, smaller batch of an epoch reuses its bucket's graph rather than compiling another."""
    moved = {name: tensor.to(device) for name, tensor in batch.items()}
    if compiled:
        for tensor in moved.values():
            torch._dynamo.mark_dynamic(tensor, 0)
    return moved


def make_loader(
    split: TokenizedSplit,
    batches: list[list[int]],
    tokenizer: PreTrainedTokenizerBase,
    settings: DataLoaderSettings,
    buckets: tuple[int, ...] | None = None,
) -> DataLoader:
    """A loader over planned batches, padded to the longest row of each batch, or to the
    `buckets` (length_buckets) of a compiled model."""
    workers = settings.num_workers
    return DataLoader(
        split,
        batch_sampler=batches,
        collate_fn=BucketPadding(tokenizer, buckets)
        if buckets
        else DataCollatorWithPadding(tokenizer),
        num_workers=workers,
        # A backstop that also ends the wait for a stuck worker; the limits that decide, per
        # batch and with a message, are those of `watched`.
        timeout=settings.first_batch_timeout_s if workers > 0 else 0,
        # Pinning runs CUDA calls in a background thread; batches are copied in the main thread.
        pin_memory=False,
        # Its own generator: creating a loader iterator otherwise draws from the global torch
        # RNG, and a resumed run would see different dropout masks than an uninterrupted one.
        generator=torch.Generator().manual_seed(0),
    )


class DataLoaderStalled(RuntimeError):
    """No batch arrived within the configured time."""


_END = object()


def _stalled(name: str, received: int, limit: float) -> DataLoaderStalled:
    which = "first batch" if received == 0 else f"batch {received + 1}"
    return DataLoaderStalled(
        f"{name} data: no {which} after {limit:g} s. Likely causes: a DataLoader worker that "
        "hangs or was killed (out of memory: check the kernel log); a deadlock after fork "
        "(tokenizer or OpenMP threads: keep TOKENIZERS_PARALLELISM=false, or set "
        "train.dataloader.num_workers: 0 to rule workers out); a machine so overloaded (swapping, "
        "more threads than cores) that collating stalls. Limits: "
        "train.dataloader.first_batch_timeout_s and timeout_s."
    )


def watched(loader: DataLoader, settings: DataLoaderSettings, name: str) -> Iterator[dict]:
    """The loader's batches, or DataLoaderStalled when one takes longer than allowed.

    A daemon thread iterates the loader (CPU work only: collating, no CUDA) and the caller waits
    on a queue with a timeout, so it gets control back whatever the loader is blocked in. The
    first batch has its own, longer limit: workers start and may load files.
    """
    batches: queue.Queue = queue.Queue(maxsize=2)

    def produce() -> None:
        try:
            for batch in loader:
                batches.put((batch, None))
            batches.put((_END, None))
        except BaseException as error:  # handed to the caller, which raises it
            batches.put((None, error))

    threading.Thread(target=produce, name=f"{name}-batches", daemon=True).start()
    received = 0
    while True:
        limit = settings.first_batch_timeout_s if received == 0 else settings.timeout_s
        try:
            batch, error = batches.get(timeout=limit)
        except queue.Empty:
            raise _stalled(name, received, limit) from None
        # The loader's own backstop (see make_loader) may fire first: the same stall.
        if isinstance(error, RuntimeError) and str(error).startswith("DataLoader timed out"):
            raise _stalled(name, received, limit) from error
        if error is not None:
            raise error
        if batch is _END:
            return
        received += 1
        yield batch
