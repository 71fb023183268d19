"""Classification metrics over every class of the label map, as plain JSON-ready values.

Shared by the baseline and the fine-tuned model, so their numbers are computed the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, precision_recall_fscore_support

TOP_K = 3
"""The k of the top-k accuracy: the true account among the k most probable ones."""
TOP_K_ACCURACY = f"top_{TOP_K}_accuracy"


def top_k(probabilities: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k most probable label ids of each row, most probable first, and their probabilities.

    Ties go to the lower label id (a stable sort), the same rule as `argmax`, so the first id is
    always the top-1 prediction. With fewer than k labels, all of them are returned. (sklearn's
    `top_k_accuracy_score` breaks ties towards the higher id, so top-k is counted here.)
    """
    order = np.argsort(-probabilities, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(probabilities, order, axis=1)


def _defined(value: float) -> float | None:
    """A plain float, or None where the ratio is undefined (0/0)."""
    return None if np.isnan(value) else float(value)


def classification_metrics(
    y_true: np.ndarray, probabilities: np.ndarray, labels: list[str]
) -> dict[str, Any]:
    """Accuracy, macro-F1, weighted-F1, top-3 accuracy and per-class scores of one split.

    `y_true` holds label ids (indices into `labels`); `probabilities` is [n, len(labels)] and its
    argmax is the prediction.

    Per class, with TP/FP/FN counted over the split:

    - precision = TP / (TP + FP): null when the class is never predicted;
    - recall = TP / (TP + FN): null when the class has no sample (`zero_support: true`);
    - F1 = 2·TP / (2·TP + FP + FN): null only when the class is neither present nor predicted.
      A present class that is never predicted has F1 = 0.

    Every class of the label map is listed, in label-id order, including those without samples.

    Macro-F1 is the unweighted mean F1 over the classes present in `y_true` (sklearn's
    `f1_score(average="macro", labels=<classes in y_true>, zero_division=0)`); their number is
    `macro_f1_classes`. Classes absent from `y_true` are left out of the mean: with no sample their
    F1 is either undefined or 0 for any wrong prediction into them, and that wrong prediction
    already counts as a false negative of the sample's true class. Averaging over the whole label
    map would instead tie the score to how many classes happen to be absent from a small split.
    (sklearn's default, `labels=None`, averages over the classes in `y_true` or in the
    predictions: each class predicted but absent would add an F1 of 0.) Classes present but
    never predicted are in the mean with F1 = 0. `classes_predicted` counts the classes
    predicted at least once. Weighted-F1 is the support-weighted mean over the present classes.

    On an empty split the overall scores are null.
    """
    y_true = np.asarray(y_true, dtype=np.int64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    num_labels = len(labels)
    if probabilities.ndim != 2 or probabilities.shape != (len(y_true), num_labels):
        raise ValueError(
            f"probabilities must be [{len(y_true)}, {num_labels}] (samples by labels), "
            f"not {list(probabilities.shape)}"
        )
    if len(y_true) and (y_true.min() < 0 or y_true.max() >= num_labels):
        raise ValueError(
            f"label ids must lie in [0, {num_labels}), got {y_true.min()}..{y_true.max()}"
        )

    samples = len(y_true)
    ranked, _ = top_k(probabilities, TOP_K)
    predicted = ranked[:, 0]
    support = np.bincount(y_true, minlength=num_labels)
    predicted_count = np.bincount(predicted, minlength=num_labels)
    if samples:
        # NaN where a ratio is undefined (0/0); F1 = 2·TP / (2·TP + FP + FN).
        precision, recall, f1_all, _ = precision_recall_fscore_support(
            y_true, predicted, labels=np.arange(num_labels), average=None, zero_division=np.nan
        )
    else:
        precision = recall = f1_all = np.full(num_labels, np.nan)

    per_class = {
        label: {
            "label_id": label_id,
            "support": int(support[label_id]),
            "predicted": int(predicted_count[label_id]),
            "precision": _defined(precision[label_id]),
            "recall": _defined(recall[label_id]),
            "f1": _defined(f1_all[label_id]),
            "zero_support": bool(support[label_id] == 0),
        }
        for label_id, label in enumerate(labels)
    }
    # Over present classes only, where 2·TP + FP + FN > 0 always holds.
    present = support > 0
    f1 = f1_all[present]
    return {
        "samples": samples,
        "accuracy": float(accuracy_score(y_true, predicted)) if samples else None,
        "macro_f1": float(f1.mean()) if samples else None,
        "weighted_f1": float((f1 * support[present]).sum() / samples) if samples else None,
        TOP_K_ACCURACY: (
            float((ranked == y_true[:, None]).any(axis=1).mean()) if samples else None
        ),
        "macro_f1_classes": int(present.sum()),
        "classes_total": num_labels,
        "classes_predicted": int((predicted_count > 0).sum()),
        "per_class": per_class,
    }
