"""The evidence index: the training and validation records as a model sees them, so that every
prediction can show the records nearest to it ("booked to 4930 because these three earlier
postings look like this one and were booked to 4930").

An index is a folder of two files: `records.parquet` (id, text, account, where the account came
from, and the split) and the records' vectors, L2-normalised so that a dot product is the cosine
similarity. The fine-tuned model's vectors are its pooled embeddings, the very vector its head
reads, stored as float16 (`vectors.npy`: a cosine to three digits, half the size); the baseline's
are its TF-IDF rows, sparse (`vectors.npz`). The fine-tuned model's index lies in its folder
(`evidence/`), so the folder's manifest holds the files' sha256 like every other file's. A warm
start keeps its old model's vectors while the encoder has barely moved (`build_model_index`).

Search is exact: the queries' vectors times the index and torch's top-k per row. At the sizes a
ledger has (up to some 100,000 training rows) that comes within 1.2x of faiss's exact index and
needs no extra dependency; numpy's argpartition was 3.7x slower (bench/evidence_search.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl
import scipy.sparse
import torch
from sklearn.preprocessing import normalize

from account_tax.data.features import LABEL_MAP
from account_tax.data.serialize import ID, LABEL_ID, TEXT, read_labels
from account_tax.data.spec import LABEL_SOURCE, LEDGER
from account_tax.io import write_parquet
from account_tax.training.inference import load_classifier, score_texts
from account_tax.training.model import read_training_info

log = logging.getLogger(__name__)

INDEX_DIR = "evidence"
"""The fine-tuned model's index, inside its folder."""
RECORDS = "records.parquet"
DENSE_VECTORS = "vectors.npy"
SPARSE_VECTORS = "vectors.npz"
ACCOUNT = "account"
SPLIT = "split"
RECORD_COLUMNS = (ID, TEXT, ACCOUNT, LABEL_SOURCE, SPLIT)
INDEXED_SPLITS = ("train", "validation")
QUERY_CHUNK = 1024
"""Queries per matrix product: bounds the [queries, index rows] similarity block."""
DRIFT_SAMPLE = 128
"""Records a warm start embeds again to see how far the encoder moved (build_model_index)."""
DRIFT_QUANTILE = 0.1

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
        if scipy.sparse.issparse(self.vectors):
            return self.vectors.T.tocsr()
        return torch.from_numpy(np.ascontiguousarray(self.vectors, dtype=np.float32))

    def nearest(self, queries: Vectors, k: int) -> Neighbours:
        """The k most similar records of every query (fewer where the index is smaller)."""
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


def carried_rows(previous: EvidenceIndex, records: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The positions in `records` of the training records `previous` holds with the same id and
    text (the same input to the encoder), and their positions in `previous`. Validation records
    are not carried: the final head is chosen on them (training.prototypes), and a vector off by
    a cosine of 0.005 moved a validation macro-F1 by 0.03 among 279 accounts."""
    keys = [pl.col(ID).cast(pl.String), pl.col(TEXT).fill_null("")]
    there = previous.records.select(keys).with_row_index("there").unique([ID, TEXT], keep="first")
    here = records.with_row_index("here").filter(pl.col(SPLIT) == "train").select("here", *keys)
    pairs = here.join(there, on=[ID, TEXT], how="inner").sort("here")
    return pairs["here"].to_numpy(), pairs["there"].to_numpy()


def carry_vectors(
    previous: EvidenceIndex,
    records: pl.DataFrame,
    embed: Callable[[np.ndarray], np.ndarray],
    reuse_min_cosine: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """The positions in `records` whose vectors are settled without embedding them all, those
    vectors, and what was measured: DRIFT_SAMPLE of the carried rows embedded again, and when
    they moved little enough (see build_model_index) the other carried rows' stored vectors."""
    here, there = carried_rows(previous, records)
    sample = np.random.default_rng(seed).choice(len(here), min(DRIFT_SAMPLE, len(here)), False)
    if not len(sample):
        return here, previous.vectors[there], {}
    fresh = embed(here[sample])
    cosines = (fresh * unit_rows(previous.vectors[there[sample]])).sum(axis=1)
    drift = float(np.quantile(cosines, DRIFT_QUANTILE))
    carry = reuse_min_cosine < 1 and drift >= reuse_min_cosine
    log.info(
        "evidence index: %d records re-embedded, cosine to their stored vectors %.4f "
        "(10th percentile; carried from %.4f): %s",
        len(sample),
        drift,
        reuse_min_cosine,
        "the others carried" if carry else "all embedded again",
    )
    cost = {"evidence_index_drift_cosine": drift}
    if not carry:
        return here[sample], fresh, cost
    kept = np.setdiff1d(np.arange(len(here)), sample)
    cost["evidence_index_carried_rows"] = len(kept)
    rows = np.concatenate([here[sample], here[kept]])
    return rows, np.concatenate([fresh, previous.vectors[there[kept]]]), cost


def build_model_index(
    model_dir: Path,
    splits: dict[str, Path],
    carried: Path | None = None,
    reuse_min_cosine: float = 1.0,
    seed: int = 0,
    batch_size: int = 64,
) -> dict[str, float]:
    """Embed the splits' records with the exported model, pooled as its head sees them, and
    store the index in the model's folder; return what it cost (seconds, records embedded).

    `carried`: the model a warm start began from. Its index's vectors are kept for the training
    records it holds (same id and text) when the encoder has barely moved: DRIFT_SAMPLE of them,
    embedded again, keep a cosine of at least `reuse_min_cosine` (below 1) with their stored
    vectors in all but a tenth (DRIFT_QUANTILE). Otherwise every record is embedded again.
    Embedding every record is most of a short warm start's cost, and stored vectors that have
    drifted would mislead the evidence and the head refitted on them."""
    started = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer, _ = load_classifier(model_dir, device)
    records = indexed_records(splits, read_labels(model_dir / LABEL_MAP))
    max_length = read_training_info(model_dir)["settings"]["max_length"]
    texts = records[TEXT].to_list()

    def embed(rows: np.ndarray) -> np.ndarray:
        pooled = score_texts(model, tokenizer, [texts[row] for row in rows], batch_size, max_length)
        return unit_rows(pooled[1])

    cost: dict[str, float] = {"evidence_index_carried_rows": 0}
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    if carried is not None and (carried / INDEX_DIR / RECORDS).is_file():
        index = EvidenceIndex.read(carried / INDEX_DIR)
        rows, settled, measured = carry_vectors(index, records, embed, reuse_min_cosine, seed)
        parts.append((rows, settled))
        cost |= measured
    elif carried is not None:
        log.info("evidence index: %s has none to carry", carried)
    missing = np.arange(records.height)
    if parts:
        missing = np.setdiff1d(missing, parts[0][0])
    if len(missing) or not parts:
        parts.append((missing, embed(missing)))
    order = np.argsort(np.concatenate([rows for rows, _ in parts]))
    vectors = np.concatenate([part for _, part in parts])[order]
    EvidenceIndex(vectors, records).write(model_dir / INDEX_DIR)
    cost["evidence_index_seconds"] = time.perf_counter() - started
    log.info(
        "evidence index: %d records, %d of them embedded, in %.1f s",
        records.height,
        records.height - cost["evidence_index_carried_rows"],
        cost["evidence_index_seconds"],
    )
    return cost
