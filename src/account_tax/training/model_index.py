"""The fine-tuned model's evidence index (`training.evidence`), built when training exports a
model: the splits' records embedded with the exported model, pooled as its head sees them. A
warm start keeps its old model's vectors while the encoder has barely moved.

A module of its own so that the stages that only read or search an index (the baseline's is
TF-IDF rows) do not load the model's libraries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import torch

from account_tax.data.label_map import LABEL_MAP, LabelMap
from account_tax.data.serialize import ID, TEXT
from account_tax.training.evidence import (
    INDEX_DIR,
    RECORDS,
    SPLIT,
    EvidenceIndex,
    indexed_records,
    unit_rows,
)
from account_tax.training.inference import load_classifier, score_texts
from account_tax.training.training_info import read_training_info

log = logging.getLogger(__name__)

DRIFT_SAMPLE = 128
"""Records a warm start embeds again to see how far the encoder moved (build_model_index)."""
DRIFT_QUANTILE = 0.1


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
    records = indexed_records(splits, LabelMap.read(model_dir / LABEL_MAP).labels)
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
