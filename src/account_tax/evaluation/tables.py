"""The tables scoring reads and writes: serialized splits in, the predictions table out (the same
for every scorer: the baseline, the model, their mix)."""

from __future__ import annotations

import numpy as np
import polars as pl

from account_tax.data.serialize import ID, LABEL_ID
from account_tax.data.spec import CONFIDENCE, PREDICTED_LABEL
from account_tax.evaluation.metrics import top_k

LABEL = "label"
PREDICTED_LABEL_ID = "predicted_label_id"
TOP_K_LABEL_IDS = "top_k_label_ids"
TOP_K_LABELS = "top_k_labels"
TOP_K_PROBABILITIES = "top_k_probabilities"


def top_k_columns(
    probabilities: np.ndarray, k: int, labels: list[str], postable: np.ndarray | None
) -> list[pl.Series]:
    """The prediction (id and name), its probability (`confidence`), and the k most probable
    classes (ids, names, probabilities), most probable first. An account that takes no postings
    (not `postable`: a chart's group) is never listed, also where k exceeds the accounts that
    do; a row's list is as long whatever other rows are scored with it."""
    ranked = probabilities
    if postable is not None:
        k = min(k, int(postable.sum()))
        ranked = np.where(postable, probabilities, -1.0)
    ids, _ = top_k(ranked, k)
    scores = np.take_along_axis(probabilities, ids, axis=1)
    names = np.asarray(labels, dtype=object)[ids]
    return [
        pl.Series(PREDICTED_LABEL_ID, ids[:, 0], dtype=pl.Int32),
        pl.Series(PREDICTED_LABEL, names[:, 0].tolist(), dtype=pl.String),
        pl.Series(CONFIDENCE, scores[:, 0], dtype=pl.Float32),
        pl.Series(TOP_K_LABEL_IDS, ids.astype(np.int32)).cast(pl.List(pl.Int32)),
        pl.Series(TOP_K_LABELS, names.tolist(), dtype=pl.List(pl.String)),
        pl.Series(TOP_K_PROBABILITIES, scores.astype(np.float32)).cast(pl.List(pl.Float32)),
    ]


def predictions_frame(
    split: pl.DataFrame,
    probabilities: np.ndarray,
    k: int,
    labels: list[str],
    postable: np.ndarray | None,
) -> pl.DataFrame:
    """One row per record: its true label (id and name), the prediction and the top k; readable
    without the label map."""
    truth = split.select(
        ID,
        LABEL_ID,
        pl.col(LABEL_ID)
        .replace_strict(list(range(len(labels))), labels, return_dtype=pl.String)
        .alias(LABEL),
    )
    return truth.with_columns(top_k_columns(probabilities, k, labels, postable))
