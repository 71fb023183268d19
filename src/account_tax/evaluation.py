"""Evaluation of the fine-tuned model on validation and test, side by side with the baseline.

The model's scores are computed by the same `classification_metrics` as the baseline's, on the
same serialized splits, so the comparison is like for like. The verdict (does the fine-tuned
model beat the baseline on test macro-F1?) is written out, not left to the reader.
"""

from __future__ import annotations

import html
import json
import logging
from pathlib import Path
from typing import Any

from account_tax.inference import load_classifier, predict_probabilities
from account_tax.metrics import TOP_K_ACCURACY, classification_metrics
from account_tax.model import TRAINING_INFO
from account_tax.predictions import predictions_frame, read_split
from account_tax.serialize import LABEL_ID, TEXT

log = logging.getLogger(__name__)

HEADLINE = ("accuracy", "macro_f1", "weighted_f1", TOP_K_ACCURACY)
DECIDING_METRIC = "macro_f1"


def score_model(
    model_dir: Path, splits: dict[str, Path], batch_size: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Metrics per split, and the predictions frame per split."""
    model, tokenizer, labels = load_classifier(model_dir)
    info = json.loads((model_dir / TRAINING_INFO).read_text(encoding="utf-8"))
    max_length = info["settings"]["max_length"]
    report: dict[str, Any] = {}
    predictions: dict[str, Any] = {}
    for name, path in splits.items():
        split = read_split(path, len(labels))
        probabilities = predict_probabilities(
            model, tokenizer, split[TEXT].to_list(), batch_size, max_length
        )
        report[name] = classification_metrics(split[LABEL_ID].to_numpy(), probabilities, labels)
        predictions[name] = predictions_frame(split, probabilities, 3)
        log.info(
            "%s: accuracy %s, macro-F1 %s on %d rows",
            name,
            report[name]["accuracy"],
            report[name]["macro_f1"],
            split.height,
        )
    return report, predictions


def compare(model: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """Headline scores side by side per split, and whether the model beats the baseline."""
    table = {
        split: {
            metric: {"fine-tuned": model[split][metric], "baseline": baseline[split][metric]}
            for metric in HEADLINE
        }
        for split in ("validation", "test")
    }
    deciding = table["test"][DECIDING_METRIC]
    beats = (
        None if None in deciding.values() else bool(deciding["fine-tuned"] > deciding["baseline"])
    )
    return {
        "table": table,
        "deciding_metric": f"test {DECIDING_METRIC}",
        "model_beats_baseline": beats,
    }


def verdict(comparison: dict[str, Any]) -> str:
    scores = comparison["table"]["test"][DECIDING_METRIC]
    if comparison["model_beats_baseline"] is None:
        return "No verdict: the test split is empty, so test macro-F1 is undefined."
    model, baseline = scores["fine-tuned"], scores["baseline"]
    if comparison["model_beats_baseline"]:
        return (
            f"The fine-tuned model beats the baseline on test macro-F1: "
            f"{model:.3f} vs {baseline:.3f}."
        )
    return (
        f"The fine-tuned model does NOT beat the TF-IDF baseline on test macro-F1: "
        f"{model:.3f} vs {baseline:.3f}. The baseline is the better choice for this data and "
        f"configuration; consider more epochs, a larger model, or more data."
    )


def summary_html(comparison: dict[str, Any], run_id: str | None) -> str:
    """A small standalone page for the report: the verdict and the headline table."""
    rows = []
    for split, metrics in comparison["table"].items():
        for metric, scores in metrics.items():
            cells = "".join(
                f"<td>{'n/a' if v is None else f'{v:.3f}'}</td>"
                for v in (scores["fine-tuned"], scores["baseline"])
            )
            rows.append(f"<tr><td>{split}</td><td>{metric}</td>{cells}</tr>")
    run = f"<p>MLflow run: <code>{html.escape(run_id)}</code></p>" if run_id else ""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Evaluation</title></head><body>"
        f"<p><strong>{html.escape(verdict(comparison))}</strong></p>{run}"
        "<table border='1' cellpadding='4'><tr><th>split</th><th>metric</th>"
        "<th>fine-tuned</th><th>baseline</th></tr>" + "".join(rows) + "</table></body></html>\n"
    )
