"""The evidence index: the training and validation records as a model sees them, so that every
prediction can show the records nearest to it ("booked to 4930 because these three earlier
postings look like this one and were booked to 4930").

An index is a folder of two files: `records.parquet` (id, text, account, where the account came
from, and the split) and the records' vectors, L2-normalised so that a dot product is the cosine
similarity. The fine-tuned model's vectors are its pooled embeddings, the very vector its head
reads, stored as float16 (`vectors.npy`: a cosine to three digits, half the size); the baseline's
are its TF-IDF rows, sparse (`vectors.npz`). The fine-tuned model's index lies in its folder
(`evidence/`), so the folder's manifest holds the files' sha256 like every other file's; training
builds it (`training.model_index`).

Search is exact: the queries' vectors times the index and torch's top-k per row. At the sizes a
ledger has (up to some 100,000 training rows) that comes within 1.2x of faiss's exact index and
needs no extra dependency; numpy's argpartition was 3.7x slower (bench/evidence_search.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl
import scipy.sparse
from sklearn.preprocessing import normalize

from account_tax.data.serialize import ID, LABEL_ID, TEXT
from account_tax.data.spec import LABEL_SOURCE, LEDGER
from account_tax.io import write_parquet

if TYPE_CHECKING:
    import torch

INDEX_DIR = "evidence"
"""The fine-tuned model's index, inside its folder."""
RECORDS = "records.parquet"
DENSE_VECTORS = "vectors.npy"
SPARSE_VECTORS = "vectors.npz"
ACCOUNT = "account"
SPLIT = "split"
RECORD_COLUMNS = (ID, TEXT, ACCOUNT, LABEL_SOURCE, SPLIT)
QUERY_CHUNK = 1024
"""Queries per matrix product: bounds the [queries, index rows] similarity block."""

Vectors = np.ndarray | scipy.sparse.csr_matrix


class Neighbours(NamedTuple):
    """Per query, the positions in the index of its k nearest records, nearest first, and their
    cosine similarities."""

    rows: np.ndarray
    similarities: np.ndarray


@dataclass(frozen=True)
class EvidenceIndex:
    vectors: Vectors
    records: pl.DataFrame

    def part(self, split: str) -> EvidenceIndex:
        """The records of one split: validation rows are searched among the train part, so
        that a record is never its own evidence there."""
        rows = np.flatnonzero(self.records[SPLIT].to_numpy() == split)
        return EvidenceIndex(self.vectors[rows], self.records[rows])

    @cached_property
    def searched(self) -> torch.Tensor | scipy.sparse.csr_matrix:
        """The vectors as searched: dense ones as a tensor, sparse ones transposed (once)."""
        # torch only where an index is searched: the baseline job builds and writes its own
        # without loading it.
        import torch

        if scipy.sparse.issparse(self.vectors):
            return self.vectors.T.tocsr()
        return torch.from_numpy(np.ascontiguousarray(self.vectors, dtype=np.float32))

    def nearest(self, queries: Vectors, k: int) -> Neighbours:
        """The k most similar records of every query (fewer where the index is smaller)."""
        import torch

        k = min(k, self.records.height)
        rows = np.zeros((queries.shape[0], k), dtype=np.int64)
        similarities = np.zeros((queries.shape[0], k), dtype=np.float32)
        if not k or not queries.shape[0]:
            return Neighbours(rows, similarities)
        queries = unit_rows(queries)
        for start in range(0, queries.shape[0], QUERY_CHUNK):
            chunk = queries[start : start + QUERY_CHUNK]
            if scipy.sparse.issparse(chunk):
                block = torch.from_numpy((chunk @ self.searched).toarray())
            else:
                block = torch.from_numpy(chunk) @ self.searched.T
            # torch's top-k: several times faster than numpy's argpartition on wide blocks.
            scores, top = torch.topk(block, k, dim=1)
            rows[start : start + len(top)] = top.numpy()
            similarities[start : start + len(top)] = scores.numpy()
        # Rounding can lift a unit vector's cosine with itself a little above 1.
        return Neighbours(rows, np.clip(similarities, -1.0, 1.0))

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if scipy.sparse.issparse(self.vectors):
            scipy.sparse.save_npz(folder / SPARSE_VECTORS, self.vectors.astype(np.float32))
        else:
            np.save(folder / DENSE_VECTORS, self.vectors.astype(np.float16))
        write_parquet(self.records.select(RECORD_COLUMNS), folder / RECORDS)

    @classmethod
    def read(cls, folder: Path) -> EvidenceIndex:
        records = pl.read_parquet(folder / RECORDS)
        if (folder / SPARSE_VECTORS).is_file():
            vectors: Vectors = scipy.sparse.load_npz(folder / SPARSE_VECTORS).tocsr()
        else:
            # Searched in float32: float16 products are slow on most CPUs.
            vectors = np.load(folder / DENSE_VECTORS).astype(np.float32)
        if vectors.shape[0] != records.height:
            raise ValueError(
                f"{folder}: {vectors.shape[0]} vectors for {records.height} records; the index "
                f"is damaged: train (or the baseline) again"
            )
        return cls(vectors, records)


def unit_rows(vectors: Vectors) -> Vectors:
    """Rows scaled to length 1 (a zero row stays zero: it is similar to nothing)."""
    if scipy.sparse.issparse(vectors):
        return normalize(vectors.astype(np.float32), copy=True).tocsr()
    return normalize(np.asarray(vectors, dtype=np.float32), copy=True)


def indexed_records(splits: dict[str, Path], labels: list[str]) -> pl.DataFrame:
    """The records of the serialized splits, each with its account and split."""
    frames = []
    for name, path in splits.items():
        frame = pl.read_parquet(path)
        source = pl.col(LABEL_SOURCE) if LABEL_SOURCE in frame.columns else pl.lit(LEDGER)
        frames.append(
            frame.select(
                ID,
                pl.col(TEXT).fill_null(""),
                pl.col(LABEL_ID)
                .replace_strict(list(range(len(labels))), labels, return_dtype=pl.String)
                .alias(ACCOUNT),
                source.alias(LABEL_SOURCE),
                pl.lit(name).alias(SPLIT),
            )
        )
    return pl.concat(frames)
