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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import polars as pl
import scipy.sparse

from account_tax.data.clean import CleanSettings, clean
from account_tax.data.features import LABEL_MAP, FeatureSettings, derived_columns, postable_mask
from account_tax.data.ingest import ingest
from account_tax.data.serialize import ID, TEXT, SerializeSettings, read_labels, text_expression
from account_tax.data.spec import DataSpec
from account_tax.errors import DataError
from account_tax.evaluation.assessment import BASELINE, MODEL, ensemble_logits, postable_only
from account_tax.evaluation.baseline import classifier_logits
from account_tax.evaluation.evidence import (
    EVIDENCE_COLUMNS,
    NOVEL,
    baseline_features,
    evidence_columns,
    weighing_ngrams,
)
from account_tax.evaluation.review import DECISION, REVIEW, decisions
from account_tax.evaluation.shipped import ShippedCandidate, read_shipped
from account_tax.evaluation.tables import (
    CONFIDENCE,
    PREDICTED_LABEL,
    TOP_K_LABELS,
    TOP_K_PROBABILITIES,
    top_k_columns,
)
from account_tax.io import parquet_rows, sha256_file, write_parquet
from account_tax.settings import SOURCE_ROW, SectionView
from account_tax.storage.manifest import content_sha256
from account_tax.training.evidence import INDEX_DIR, RECORDS, EvidenceIndex, Vectors
from account_tax.training.inference import load_classifier, model_temperature, score_texts
from account_tax.training.model import read_training_info
from account_tax.training.temperature import softmax

log = logging.getLogger(__name__)

AUTO_THRESHOLD = "auto_threshold"
CANDIDATE = "candidate"
MODEL_SHA256 = "model_sha256"
BASELINE_SHA256 = "baseline_sha256"
TRAINING_RUN_ID = "training_run_id"
MODEL_S3_URI = "model_s3_uri"
PREDICTION_COLUMNS = (
    PREDICTED_LABEL,
    CONFIDENCE,
    TOP_K_LABELS,
    TOP_K_PROBABILITIES,
    *EVIDENCE_COLUMNS,
)
PROVENANCE_COLUMNS = (CANDIDATE, MODEL_SHA256, BASELINE_SHA256, TRAINING_RUN_ID, MODEL_S3_URI)
"""The columns of `Provenance`'s fields, in their order."""
BATCH_SIZE = 64
"""Texts per inference batch."""
CHUNK_ROWS = 8192
"""Rows scored at a time; each chunk is sorted by length into batches."""


@dataclass(frozen=True)
class PredictSettings(SectionView):
    SECTION = "predict"
    # Name -> file of new records, each predicted to results/predict/<name>.parquet.
    inputs: dict[str, str]
    top_k: int
    evidence_k: int


@dataclass(frozen=True)
class PredictPaths:
    predictions: Path
    rejects: Path
    review: Path


def record_columns(spec: DataSpec) -> list[str]:
    """The input's own columns that a prediction row carries as read (the label is there
    already, cleaned): with its account filled in, a reviewed row is a whole record that
    data.corrections can add to the ledger. A column named like one of predict's is left out."""
    own = {SOURCE_ROW, ID, TEXT, DECISION, AUTO_THRESHOLD, *PREDICTION_COLUMNS, *PROVENANCE_COLUMNS}
    return [c for c in spec.columns if c != spec.label and c not in own]


def serialized_records(
    source: Path, spec: DataSpec, config: dict[str, Any], rejects: Path, work_dir: Path
) -> pl.DataFrame:
    """`source_row`, `id`, `text`, the label (when the file has one) and the record's columns as
    read (`record_columns`) of every usable row."""
    # Labels are optional here, and one outside the training classes is no reason to reject.
    spec = dataclasses.replace(spec, classes=None)
    records, cleaned = work_dir / "records.parquet", work_dir / "clean.parquet"
    ingest(spec, records, source, require_label=False)
    # A record is predicted even when it repeats another.
    options = dataclasses.replace(CleanSettings.of(config["clean"]), drop_duplicates=False)
    clean(records, spec, cleaned, rejects, options, require_label=False)
    featured = pl.scan_parquet(cleaned).with_columns(
        derived_columns(spec, FeatureSettings.of(config["features"]))
    )
    schema = featured.collect_schema()
    serialized = featured.select(
        SOURCE_ROW,
        pl.col(spec.id or SOURCE_ROW).cast(pl.String).alias(ID),
        text_expression(schema, SerializeSettings.of(config["serialize"])).alias(TEXT),
        pl.col(spec.label),
    )
    as_read = pl.scan_parquet(records).select(
        SOURCE_ROW, *(pl.col(c).cast(pl.String) for c in record_columns(spec))
    )
    return serialized.join(as_read, on=SOURCE_ROW, how="left", maintain_order="left").collect()


@dataclass(frozen=True)
class Provenance:
    """What every prediction row carries, so that it can be traced to the model and its run."""

    candidate: str
    model_sha256: str
    baseline_sha256: str | None
    training_run_id: str | None
    model_s3_uri: str | None

    @classmethod
    def of(
        cls, candidate: str, model_dir: Path, baseline_model: Path, receipt: Path | None
    ) -> Provenance:
        info = read_training_info(model_dir)
        uri = None
        if receipt is not None:
            stored = json.loads(receipt.read_text(encoding="utf-8"))
            uri = f"s3://{stored['bucket']}/{stored['prefix']}"
        baseline = sha256_file(baseline_model) if candidate != MODEL else None
        return cls(candidate, content_sha256(model_dir), baseline, info.get("mlflow_run_id"), uri)


def load_shipped(
    evaluation: Path, model_dir: Path, baseline_model: Path, receipt: Path | None
) -> tuple[ShippedCandidate, Provenance]:
    """What evaluate shipped (from its metrics.json), and the provenance every prediction made
    with it carries (the model's upload receipt, where uploads are on)."""
    shipped = read_shipped(evaluation)
    return shipped, Provenance.of(shipped.candidate, model_dir, baseline_model, receipt)


@dataclass(frozen=True)
class Scored:
    """A candidate's view of some texts: its calibrated probabilities, the texts' vectors in its
    evidence index's space, and the baseline's TF-IDF rows where the baseline takes part."""

    probabilities: np.ndarray
    vectors: Vectors
    features: scipy.sparse.csr_matrix | None


class Candidate:
    """The candidate evaluate chose (see `choose_candidate`): the fine-tuned model, the baseline,
    or their mix, loaded once with its evidence index (the model's for the model and the mix,
    the baseline's TF-IDF one for the baseline); `score` gives its calibrated class
    probabilities, `evidence` what speaks for each suggestion."""

    def __init__(
        self,
        model_dir: Path,
        baseline_model: Path | None,
        shipped: ShippedCandidate,
        batch_size: int = BATCH_SIZE,
        baseline_evidence: Path | None = None,
    ) -> None:
        self.labels = read_labels(model_dir / LABEL_MAP)
        self.postable = postable_mask(model_dir / LABEL_MAP)
        self.shipped = shipped
        self.batch_size = batch_size
        self.model = self.pipeline = None
        if shipped.candidate != BASELINE:
            self.model = load_classifier(model_dir)
            self.max_length = read_training_info(model_dir)["settings"]["max_length"]
            self.temperature = model_temperature(model_dir)
        if shipped.candidate != MODEL:
            self.pipeline = joblib.load(baseline_model)
        index_dir = model_dir / INDEX_DIR if self.model is not None else baseline_evidence
        if index_dir is None or not (index_dir / RECORDS).is_file():
            raise DataError(
                f"{index_dir or 'the baseline'}: no evidence index; the model (or baseline) was "
                f"trained before evidence existed: run the workflow again (snakemake -R train "
                f"baseline)"
            )
        self.index = EvidenceIndex.read(index_dir)

    def score(self, texts: list[str]) -> Scored:
        """The calibrated probabilities, the accounts that take no postings at 0 in each part as
        evaluate scores them (`postable_only`), and the texts' vectors."""
        model_probabilities = baseline_probabilities = embeddings = features = None
        if self.model is not None:
            logits, embeddings = score_texts(
                self.model.model, self.model.tokenizer, texts, self.batch_size, self.max_length
            )
            calibrated = softmax(logits, self.temperature)
            model_probabilities = postable_only(calibrated, self.postable).astype(np.float32)
        if self.pipeline is not None:
            features = baseline_features(self.pipeline, texts)
            calibrated = softmax(
                classifier_logits(self.pipeline, features, len(self.labels)),
                self.shipped.baseline_temperature,
            )
            baseline_probabilities = postable_only(calibrated, self.postable)
        if self.pipeline is None:
            return Scored(model_probabilities, embeddings, None)
        if self.model is None:
            return Scored(baseline_probabilities, features, features)
        mixed = ensemble_logits(
            model_probabilities, baseline_probabilities, self.shipped.ensemble_weight
        )
        calibrated = softmax(mixed, self.shipped.ensemble_temperature)
        return Scored(postable_only(calibrated, self.postable), embeddings, features)

    def probabilities(self, texts: list[str]) -> np.ndarray:
        return self.score(texts).probabilities

    def evidence(self, scored: Scored, predicted: np.ndarray, k: int) -> list[pl.Series]:
        """The evidence columns of the rows scored, whose suggestions are the label ids
        `predicted` (see `account_tax.evaluation.evidence`)."""
        ngrams = None
        if scored.features is not None:
            ngrams = weighing_ngrams(self.pipeline, scored.features, predicted)
        return evidence_columns(
            self.index,
            self.index.nearest(scored.vectors, k),
            [self.labels[i] for i in predicted],
            self.shipped.novelty_threshold,
            ngrams,
        )


def scored_columns(
    candidate: Candidate, texts: list[str], k: int, evidence_k: int
) -> list[pl.Series]:
    """The texts' top-k columns (see `top_k_columns`) and the evidence for their suggestions."""
    scored = candidate.score(texts)
    columns = top_k_columns(scored.probabilities, k, candidate.labels)
    predicted = columns[0].to_numpy()  # the suggestions' label ids
    return columns + candidate.evidence(scored, predicted, evidence_k)


def predict_records(
    source: Path,
    spec: DataSpec,
    config: dict[str, Any],
    candidate: Candidate,
    paths: PredictPaths,
    provenance: Provenance,
    *,
    k: int,
    evidence_k: int,
) -> dict[str, int]:
    """Write the calibrated top-k classes of every usable row of `source` from the candidate
    evaluate chose, the evidence for each suggestion (its `evidence_k` nearest training records;
    see `account_tax.evaluation.evidence`), its decision (`auto` at or above that candidate's
    auto-post threshold unless the record is novel, else `review`) and its provenance; the rows
    to review, least confident first, to their own file; return the counts."""
    with tempfile.TemporaryDirectory(prefix="predict-") as work_dir:
        records = serialized_records(source, spec, config, paths.rejects, Path(work_dir))
        rows_in = parquet_rows(Path(work_dir) / "records.parquet")
    texts = records[TEXT].to_list()
    # Chunks of rows: the [rows, classes] probabilities are never held for the whole file. An
    # empty chunk first, so that no rows still give every column its type.
    chunks = [scored_columns(candidate, [], k, evidence_k)]
    for start in range(0, len(texts), CHUNK_ROWS):
        chunks.append(scored_columns(candidate, texts[start : start + CHUNK_ROWS], k, evidence_k))
        log.info("predict: %d of %d rows scored", min(start + CHUNK_ROWS, len(texts)), len(texts))
    predicted = [pl.concat(columns) for columns in zip(*chunks, strict=True)]
    threshold = candidate.shipped.threshold
    # The decision follows the confidence as written (float32), so a reader re-checking a row
    # against the threshold always agrees with it.
    confidence = next(column for column in predicted if column.name == CONFIDENCE).to_numpy()
    novel = next(column for column in predicted if column.name == NOVEL).to_numpy()
    predictions = records.with_columns(
        *(column for column in predicted if column.name in PREDICTION_COLUMNS),
        pl.Series(DECISION, decisions(confidence, threshold, novel), dtype=pl.String),
        pl.lit(threshold, dtype=pl.Float64).alias(AUTO_THRESHOLD),
        *(
            pl.lit(value, dtype=pl.String).alias(column)
            for column, value in zip(
                PROVENANCE_COLUMNS, dataclasses.astuple(provenance), strict=True
            )
        ),
    )
    write_parquet(predictions, paths.predictions)
    to_review = predictions.filter(pl.col(DECISION) == REVIEW).sort(CONFIDENCE)
    write_parquet(to_review, paths.review)
    counts = {
        "rows_in": rows_in,
        "predicted": predictions.height,
        "auto": predictions.height - to_review.height,
        "review": to_review.height,
        "rejected": parquet_rows(paths.rejects),
    }
    if counts["rows_in"] != counts["predicted"] + counts["rejected"]:
        raise AssertionError(f"predict lost rows: {counts}")
    log.info("predict: %s (auto-post threshold %s)", counts, threshold)
    return counts
