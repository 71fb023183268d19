"""Predict: account classes for new records, through the same clean, features and serialize
code as training, and the trained model. No label is needed; where one is present it is kept
beside the prediction.

Every input row ends in the predictions or in the rejects file (with the reason); duplicates are
kept, since each input row wants its own prediction.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from account_tax.clean import clean
from account_tax.features import derived_columns
from account_tax.inference import load_classifier, predict_probabilities
from account_tax.ingest import ingest
from account_tax.io import parquet_rows, write_parquet
from account_tax.metrics import top_k
from account_tax.model import TRAINING_INFO
from account_tax.serialize import ID, TEXT, text_expression
from account_tax.settings import SOURCE_ROW, DataSpec

log = logging.getLogger(__name__)

PREDICTED_LABEL = "predicted_label"
TOP_K_LABELS = "top_k_labels"
TOP_K_PROBABILITIES = "top_k_probabilities"


def serialized_records(
    source: Path, spec: DataSpec, config: dict[str, Any], rejects: Path, work_dir: Path
) -> pl.DataFrame:
    """`source_row`, `id`, `text` (and the label, when the file has one) of every usable row."""
    # Labels are optional here, and one outside the training classes is no reason to reject.
    spec = dataclasses.replace(spec, classes=None)
    records, cleaned = work_dir / "records.parquet", work_dir / "clean.parquet"
    ingest(spec, records, source, require_label=False)
    options = config.get("clean", {})
    clean(
        records,
        spec,
        cleaned,
        rejects,
        case=options.get("case", "lower"),
        drop_duplicates=False,
        require_label=False,
    )
    featured = pl.scan_parquet(cleaned).with_columns(
        derived_columns(spec, config.get("features", {}))
    )
    schema = featured.collect_schema()
    return featured.select(
        SOURCE_ROW,
        pl.col(spec.id or SOURCE_ROW).cast(pl.String).alias(ID),
        text_expression(schema, config["serialize"]).alias(TEXT),
        pl.col(spec.label),
    ).collect()


def predict_records(
    source: Path,
    spec: DataSpec,
    config: dict[str, Any],
    model_dir: Path,
    output: Path,
    rejects: Path,
    *,
    k: int = 3,
    batch_size: int = 64,
) -> dict[str, int]:
    """Write the top-k classes and probabilities of every usable row of `source`; return counts."""
    with tempfile.TemporaryDirectory(prefix="predict-") as work_dir:
        records = serialized_records(source, spec, config, rejects, Path(work_dir))
        rows_in = parquet_rows(Path(work_dir) / "records.parquet")
    model, tokenizer, labels = load_classifier(model_dir)
    info = json.loads((model_dir / TRAINING_INFO).read_text(encoding="utf-8"))
    max_length = info["settings"]["max_length"]
    probabilities = predict_probabilities(
        model, tokenizer, records[TEXT].to_list(), batch_size, max_length
    )
    ids, scores = top_k(probabilities, k)
    names = np.asarray(labels, dtype=object)[ids]
    predictions = records.with_columns(
        pl.Series(PREDICTED_LABEL, names[:, 0].tolist(), dtype=pl.String),
        pl.Series(TOP_K_LABELS, names.tolist(), dtype=pl.List(pl.String)),
        pl.Series(TOP_K_PROBABILITIES, scores.astype(np.float32)).cast(pl.List(pl.Float32)),
    )
    write_parquet(predictions, output)
    counts = {
        "rows_in": rows_in,
        "predicted": predictions.height,
        "rejected": parquet_rows(rejects),
    }
    if counts["rows_in"] != counts["predicted"] + counts["rejected"]:
        raise AssertionError(f"predict lost rows: {counts}")
    log.info("predict: %s", counts)
    return counts
