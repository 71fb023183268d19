"""Scores at each level of the chart of accounts, for a label map whose classes have parents.

Level 1 is the top of the chart: every account is mapped to its top ancestor; level 2 to its
ancestor one below, and so on down to the account itself at the chart's depth. An account shallower
than a level stays itself there. At each level the true and the predicted account are both mapped,
and accuracy and macro-F1 are those of `account_tax.evaluation.metrics.classification_metrics` over
the accounts of that level (macro-F1 over those present in the truth). Beside the levels, the share
of wrong predictions whose account has the true account's parent: right group, wrong account. An
error on a top-level account (no parent) never counts as in the right group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from account_tax.evaluation.metrics import classification_metrics


def ancestor_table(labels: list[str], parents: list[str | None]) -> np.ndarray:
    """[depth, classes]: row l-1 holds the label id of each class's ancestor at level l (the
    class itself where it is shallower)."""
    index = {label: label_id for label_id, label in enumerate(labels)}
    paths = []
    for label_id in range(len(labels)):
        path = [label_id]
        while (parent := parents[path[-1]]) is not None:
            if len(path) > len(labels):
                # The features stage refuses such a chart; this guards a hand-edited label map.
                raise ValueError(f"the parents of '{labels[label_id]}' form a cycle")
            path.append(index[parent])
        paths.append(path[::-1])
    depth = max((len(path) for path in paths), default=0)
    return np.array(
        [[path[min(level, len(path) - 1)] for path in paths] for level in range(depth)],
        dtype=np.int64,
    ).reshape(depth, len(labels))


def level_metrics(
    y_true: np.ndarray, predicted: np.ndarray, ancestors: np.ndarray, labels: list[str]
) -> dict[str, Any]:
    """Accuracy and macro-F1 with every account replaced by `ancestors[account]`."""
    groups = np.unique(ancestors)
    # Ids among the accounts of this level, so the one-hot predictions are [rows, groups].
    position = np.zeros(len(labels), dtype=np.int64)
    position[groups] = np.arange(len(groups))
    one_hot = np.eye(len(groups))[position[ancestors[predicted]]]
    scores = classification_metrics(
        position[ancestors[y_true]], one_hot, [labels[g] for g in groups]
    )
    return {
        "accounts": len(groups),
        "accuracy": scores["accuracy"],
        "macro_f1": scores["macro_f1"],
        "macro_f1_classes": scores["macro_f1_classes"],
    }


def hierarchy_metrics(
    y_true: np.ndarray, probabilities: np.ndarray, labels: list[str], parents: list[str | None]
) -> dict[str, Any]:
    """Per level of the chart (1 = the top), accuracy and macro-F1 of the most probable account
    mapped to its ancestor at that level; and of the errors, how many (and what share) predict
    an account with the true account's parent. `y_true` holds label ids; `probabilities` is
    [rows, len(labels)]; `parents` gives each class's parent code (None at the top)."""
    y_true = np.asarray(y_true, dtype=np.int64)
    predicted = np.asarray(probabilities).argmax(axis=1)
    table = ancestor_table(labels, parents)
    index = {label: label_id for label_id, label in enumerate(labels)}
    parent_id = np.array([-1 if p is None else index[p] for p in parents], dtype=np.int64)
    wrong = predicted != y_true
    right_group = wrong & (parent_id[y_true] >= 0) & (parent_id[predicted] == parent_id[y_true])
    errors = int(wrong.sum())
    return {
        "depth": len(table),
        "levels": [
            {"level": level, **level_metrics(y_true, predicted, ancestors, labels)}
            for level, ancestors in enumerate(table, start=1)
        ],
        "errors": errors,
        "right_parent_errors": int(right_group.sum()),
        "right_parent_share": float(right_group.sum() / errors) if errors else None,
    }
