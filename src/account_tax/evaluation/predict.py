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
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import polars as pl
import scipy.sparse
import torch

from account_tax.data.clean import CleanSettings, usable_and_rejected, written_columns
from account_tax.data.features import FeatureSettings, derived_columns
from account_tax.data.ingest import SOURCE_FILE_KEY, ingest
from account_tax.data.label_map import LABEL_MAP, LabelMap
from account_tax.data.serialize import ID, TEXT, SerializeSettings, text_expression
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
from account_tax.evaluation.ledger_rules import NO_RULE, RULE_ACCOUNT, RULE_COLUMNS, LedgerRules
from account_tax.evaluation.prediction_parts import (
    PART_FILES,
    PartWriter,
    PredictPaths,
    PredictSettings,
    chunk_range,
    gather_parts,
)
from account_tax.evaluation.review import (
    DECISION,
    DECISION_REASON,
    REVIEW,
    decision_of,
    decision_reasons,
)
from account_tax.evaluation.shipped import ShippedCandidate, read_shipped
from account_tax.evaluation.tables import (
    CONFIDENCE,
    PREDICTED_LABEL,
    TOP_K_LABELS,
    TOP_K_PROBABILITIES,
    top_k_columns,
)
from account_tax.io import parquet_rows, sha256_file
from account_tax.progress import progress_bar
from account_tax.settings import SOURCE_ROW
from account_tax.storage.manifest import content_sha256
from account_tax.training.evidence import INDEX_DIR, RECORDS, EvidenceIndex, Vectors
from account_tax.training.inference import load_classifier, model_temperature, score_texts
from account_tax.training.model import load_tokenizer
from account_tax.training.onnx_model import OnnxScorer
from account_tax.training.temperature import softmax
from account_tax.training.training_info import read_training_info

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
    *RULE_COLUMNS,
)
PROVENANCE_COLUMNS = (CANDIDATE, MODEL_SHA256, BASELINE_SHA256, TRAINING_RUN_ID, MODEL_S3_URI)
"""The columns of `Provenance`'s fields, in their order."""
BATCH_SIZE = 64
"""Texts per inference batch."""


PREDICT_OWN_COLUMNS = frozenset(
    {
        SOURCE_ROW,
        ID,
        TEXT,
        DECISION,
        DECISION_REASON,
        AUTO_THRESHOLD,
        *PREDICTION_COLUMNS,
        *PROVENANCE_COLUMNS,
    }
)
"""The columns predict writes of its own beside the record's."""


def check_record_columns(spec: DataSpec) -> None:
    """A prediction row carries the record's own columns as read, beside predict's, so that a
    reviewed row comes back as the record (data.corrections): a data column named like one of
    predict's could not ride along. Checked as predict and the backtest begin."""
    clashing = [c for c in spec.columns if c in PREDICT_OWN_COLUMNS and not c == spec.id == ID]
    if clashing:
        raise DataError(
            f"config `data.columns`: {', '.join(map(repr, clashing))} named like a column that"
            f" predict writes of its own ({', '.join(sorted(PREDICT_OWN_COLUMNS))}; `{ID}` may"
            " be the id column): a reviewed row could not bring the record back. Rename the"
            " column in the data file"
        )


def record_columns(spec: DataSpec) -> list[str]:
    """The input's own columns that a prediction row carries as read (the label is there
    already, cleaned, and an id column named `id` is predict's own): with its account filled
    in, a reviewed row is a whole record that data.corrections can add to the ledger."""
    return [c for c in spec.columns if c not in (spec.label, ID)]


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


def model_scorer(
    model_dir: Path, batch_size: int, onnx_model: Path | None
) -> Callable[[list[str]], tuple[np.ndarray, np.ndarray]]:
    """Texts to the fine-tuned model's logits and pooled embeddings (`score_texts`): in PyTorch,
    or in ONNX Runtime with `onnx_model` (one that passed its check, see `runtime_check`)."""
    max_length = read_training_info(model_dir)["settings"]["max_length"]
    if onnx_model is not None:
        log.info("scoring with ONNX Runtime: %s", onnx_model)
        tokenizer = load_tokenizer(model_dir)
        session = OnnxScorer(onnx_model, torch.get_num_threads())
        return lambda texts: session.score_texts(tokenizer, texts, batch_size, max_length)
    model, tokenizer, _ = load_classifier(model_dir)
    return lambda texts: score_texts(model, tokenizer, texts, batch_size, max_length)


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
        onnx_model: Path | None = None,
    ) -> None:
        label_map = LabelMap.read(model_dir / LABEL_MAP)
        self.labels = label_map.labels
        self.postable = label_map.postable_mask()
        self.shipped = shipped
        self.scorer = self.pipeline = None
        if shipped.candidate != BASELINE:
            self.scorer = model_scorer(model_dir, batch_size, onnx_model)
            self.temperature = model_temperature(model_dir)
        if shipped.candidate != MODEL:
            self.pipeline = joblib.load(baseline_model)
        index_dir = model_dir / INDEX_DIR if self.scorer is not None else baseline_evidence
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
        if self.scorer is not None:
            logits, embeddings = self.scorer(texts)
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
        if self.scorer is None:
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
    columns = top_k_columns(scored.probabilities, k, candidate.labels, candidate.postable)
    predicted = columns[0].to_numpy()  # the suggestions' label ids
    return columns + candidate.evidence(scored, predicted, evidence_k)


class Predictor:
    """Ingest's rows in, a chunk at a time, and their predictions and rejects out: clean,
    features and serialize as in training, then the candidate's top-k, the evidence, the
    ledger rule each record matches (with `rules`), the decision and the provenance. Row by
    row, so the file path (`predict_records`, each shard of the rule) and the served model (which
    carries its run's rules) give the same answers for the same chunks."""

    def __init__(
        self,
        spec: DataSpec,
        config: dict[str, Any],
        candidate: Candidate,
        provenance: Provenance,
        *,
        k: int,
        evidence_k: int,
        chunk_rows: int,
        rules: LedgerRules | None = None,
    ) -> None:
        # Labels are optional here, and one outside the training classes is no reason to reject.
        self.spec = dataclasses.replace(spec, classes=None)
        self.case = CleanSettings.of(config["clean"]).case
        self.derived = derived_columns(self.spec, FeatureSettings.of(config["features"]))
        self.serialize = SerializeSettings.of(config["serialize"])
        self.candidate, self.provenance = candidate, provenance
        self.k, self.evidence_k, self.chunk_rows = k, evidence_k, chunk_rows
        self.rules = rules

    @classmethod
    def configured(
        cls,
        settings: dict[str, Any],
        candidate: Candidate,
        provenance: Provenance,
        rules: LedgerRules | None = None,
    ) -> Predictor:
        """The predictor of a workflow's settings: its records as `data` describes them, its
        top k, evidence k and chunk rows from `predict`."""
        options = PredictSettings.of(settings["predict"])
        spec = DataSpec.from_config(settings)
        check_record_columns(spec)
        return cls(
            spec,
            settings,
            candidate,
            provenance,
            k=options.top_k,
            evidence_k=options.evidence_k,
            chunk_rows=options.chunk_rows,
            rules=rules,
        )

    def serialized(
        self, records: pl.DataFrame, source_file: str
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """`records`' usable rows as `source_row`, `id`, `text`, the label (null when the
        records have none), their own columns as read (`record_columns`) and the ledger rule
        each one matches (null without rules), in their order; and the rejected rows (see
        `usable_and_rejected`; they name `source_file`)."""
        usable, rejected = usable_and_rejected(
            records.lazy(), self.spec, self.case, False, source_file, {}
        )
        featured = usable.with_columns(self.derived)
        serialized = featured.select(
            SOURCE_ROW,
            pl.col(self.spec.id or SOURCE_ROW).cast(pl.String).alias(ID),
            text_expression(featured.collect_schema(), self.serialize).alias(TEXT),
            pl.col(self.spec.label),
        )
        as_read = records.lazy().select(
            SOURCE_ROW, *written_columns(records.schema, self.spec, record_columns(self.spec))
        )
        rows = serialized.join(as_read, on=SOURCE_ROW, how="left", maintain_order="left")
        if self.rules is None:
            rows = rows.with_columns(NO_RULE)
        else:
            # Matched as cleaning leaves the records, as the rules were learned: before features
            # (mask_digits rewrites a text column in place).
            rows = pl.concat([rows, self.rules.matched(usable)], how="horizontal")
        return rows.collect(), rejected.collect()

    def predict(self, records: pl.DataFrame, source_file: str) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The predictions of `records`' usable rows, in their order, and the rejected rows."""
        rows, rejected = self.serialized(records, source_file)
        predicted = scored_columns(self.candidate, rows[TEXT].to_list(), self.k, self.evidence_k)
        threshold = self.candidate.shipped.threshold
        # The decision follows the confidence as written (float32), so a reader re-checking a
        # row against the threshold always agrees with it.
        confidence = next(column for column in predicted if column.name == CONFIDENCE).to_numpy()
        novel = next(column for column in predicted if column.name == NOVEL).to_numpy()
        suggested = next(column for column in predicted if column.name == PREDICTED_LABEL)
        confirmed = None
        if self.rules is not None and self.rules.trusted:
            confirmed = (rows[RULE_ACCOUNT] == suggested).fill_null(False).to_numpy()
        reasons = decision_reasons(confidence, threshold, novel, confirmed)
        predictions = rows.with_columns(
            *(column for column in predicted if column.name in PREDICTION_COLUMNS),
            pl.Series(DECISION, decision_of(reasons), dtype=pl.String),
            pl.Series(DECISION_REASON, reasons, dtype=pl.String),
            pl.lit(threshold, dtype=pl.Float64).alias(AUTO_THRESHOLD),
            *(
                pl.lit(value, dtype=pl.String).alias(column)
                for column, value in zip(
                    PROVENANCE_COLUMNS, dataclasses.astuple(self.provenance), strict=True
                )
            ),
        )
        return predictions, rejected


def predict_part(
    records: Path, predictor: Predictor, paths: PredictPaths, shard: int = 0, shards: int = 1
) -> None:
    """Predict shard `shard` of `shards` of ingest's rows in `records` (`chunk_range`), a chunk
    at a time, into `paths`: its predictions and rejects in row order, its rows to review
    unsorted (`gather_parts` sorts them)."""
    source_file = pl.read_parquet_metadata(records).get(SOURCE_FILE_KEY, str(records))
    rows = parquet_rows(records)
    size = predictor.chunk_rows
    starts = chunk_range(rows, size, shard, shards)
    scan = pl.scan_parquet(records)
    writers = [PartWriter(path) for path in dataclasses.astuple(paths)]
    try:
        # No rows first, so that every file has every column with its type, even when empty.
        chunks = chain([scan.head(0)], (scan.slice(start, size) for start in starts))
        bar = progress_bar(total=min(rows, starts.stop) - starts.start, unit="rows", desc="predict")
        for chunk in chunks:
            records_chunk = chunk.collect()
            predictions, rejected = predictor.predict(records_chunk, source_file)
            to_review = predictions.filter(pl.col(DECISION) == REVIEW)
            for writer, frame in zip(writers, (predictions, rejected, to_review), strict=True):
                writer.write(frame)
            bar.update(records_chunk.height)
        bar.close()
    finally:
        for writer in writers:
            writer.close()


def predict_records(
    source: Path, predictor: Predictor, paths: PredictPaths, shards: int = 1
) -> dict[str, int]:
    """Predict every row of `source` (see `Predictor`) in one process: its predictions, its rows
    to review (least confident first) and its rejects to `paths`, and return the counts. The
    rule runs the same steps as jobs of their own (ingest, `shards` parts, gather)."""
    with tempfile.TemporaryDirectory(prefix="predict-") as work:
        records = Path(work) / "records.parquet"
        ingest(predictor.spec, records, source, require_label=False)
        parts = [
            PredictPaths(*(Path(work) / f"{shard}-{name}.parquet" for name in PART_FILES))
            for shard in range(shards)
        ]
        for shard, part in enumerate(parts):
            predict_part(records, predictor, part, shard, shards)
        return gather_parts(parts, records, paths, predictor.chunk_rows)
