"""Whether the ONNX Runtime model may replace PyTorch in `predict`: scored on the validation split
by both, as predict would score it (PyTorch in bf16 where the CPU has it, the same batches and
temperature), its suggestions must agree with PyTorch's on at least `runtime_min_agreement` of
the rows and its calibration error may differ by at most `runtime_max_ece_change`."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from account_tax.data.serialize import LABEL_ID, TEXT, read_split
from account_tax.evaluation.calibration import calibration_metrics
from account_tax.evaluation.prediction_parts import PredictSettings
from account_tax.training.evidence import unit_rows
from account_tax.training.inference import load_classifier, model_temperature, score_texts
from account_tax.training.onnx_model import ONNX_MODEL, OnnxScorer
from account_tax.training.temperature import softmax
from account_tax.training.training_info import read_training_info

log = logging.getLogger(__name__)

CHECK = "check.json"
"""The check's record, beside the ONNX model."""


def check_runtime(
    model_dir: Path,
    onnx_model: Path,
    validation: Path,
    settings: PredictSettings,
    batch_size: int,
    threads: int,
) -> dict[str, Any]:
    """The check's record: rows, top-1 agreement, both ECEs and their change, the smallest cosine
    between the two runtimes' embeddings of a row (the evidence's space), rows per second of
    each, and `passed`."""
    classifier = load_classifier(model_dir)
    split = read_split(validation, len(classifier.labels))
    texts, y_true = split[TEXT].to_list(), split[LABEL_ID].to_numpy()
    if not texts:
        # split.validation_fraction 0: nothing to compare the runtimes on, so PyTorch predicts.
        record = {"runtime": settings.runtime, "rows": 0, "passed": False}
        log.warning("runtime check: no validation rows to check the %s model on", settings.runtime)
        return record
    max_length = read_training_info(model_dir)["settings"]["max_length"]
    temperature = model_temperature(model_dir)
    started = time.perf_counter()
    torch_logits, torch_pooled = score_texts(
        classifier.model, classifier.tokenizer, texts, batch_size, max_length
    )
    torch_seconds = time.perf_counter() - started
    scorer = OnnxScorer(onnx_model, threads)
    started = time.perf_counter()
    onnx_logits, onnx_pooled = scorer.score_texts(
        classifier.tokenizer, texts, batch_size, max_length
    )
    onnx_seconds = time.perf_counter() - started
    ece = {
        name: calibration_metrics(softmax(logits, temperature), y_true)["ece"]
        for name, logits in (("torch", torch_logits), ("onnx", onnx_logits))
    }
    agreement = float(np.mean(torch_logits.argmax(axis=1) == onnx_logits.argmax(axis=1)))
    ece_change = abs(ece["onnx"] - ece["torch"])
    cosines = np.sum(unit_rows(torch_pooled) * unit_rows(onnx_pooled), axis=1)
    record = {
        "runtime": settings.runtime,
        "rows": len(texts),
        "top1_agreement": agreement,
        "ece_torch": ece["torch"],
        "ece_onnx": ece["onnx"],
        "ece_change": ece_change,
        "embedding_cosine_min": float(cosines.min()),
        "torch_rows_per_s": len(texts) / torch_seconds,
        "onnx_rows_per_s": len(texts) / onnx_seconds,
        "passed": agreement >= settings.runtime_min_agreement
        and ece_change <= settings.runtime_max_ece_change,
    }
    log.info("runtime check: %s", record)
    return record


def checked_onnx_model(folder: Path) -> Path | None:
    """The ONNX model in `folder` if its check passed; None, said in the log, if not."""
    record = json.loads((folder / CHECK).read_text(encoding="utf-8"))
    if record["passed"]:
        return folder / ONNX_MODEL
    if not record["rows"]:
        log.warning(
            "%s: no validation rows checked the %s model: predicting with PyTorch",
            folder,
            record["runtime"],
        )
        return None
    log.warning(
        "%s: the %s model failed its check on validation (top-1 agreement %.4f, ECE change "
        "%.4f): predicting with PyTorch",
        folder,
        record["runtime"],
        record["top1_agreement"],
        record["ece_change"],
    )
    return None
