import json

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest

from account_tax.errors import DataError
from account_tax.evaluation.metrics import classification_metrics
from account_tax.evaluation.plots import (
    OTHER,
    grouped_confusion,
    plot_baseline_comparison,
    plot_confusion_matrix,
    plot_f1_vs_support,
    plot_training_curves,
    short_label,
)
from account_tax.training.history import append_history, history_text, read_history

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path) -> None:
    """A complete PNG that decodes to a non-empty image, and no figure left open."""
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    height, width, _ = matplotlib.image.imread(path).shape
    assert height > 100 and width > 100
    assert plt.get_fignums() == []


HISTORY = [
    {"step": 1, "epoch": 0.5, "loss": 2.0, "lr": 1e-4, "head_lr": 1e-3},
    {"step": 2, "epoch": 1.0, "loss": 1.5, "lr": 2e-4, "head_lr": 2e-3, "validation_loss": 1.6},
    {"step": 3, "epoch": 1.5, "loss": 1.2, "lr": 1e-4, "head_lr": 1e-3},
    # A history from before the head had its own rate.
    {"step": 4, "epoch": 2.0, "loss": 1.0, "lr": 0.0, "val_loss": 1.1},
]


def test_history_is_read_line_by_line_and_a_bad_line_is_named(tmp_path):
    good = tmp_path / "history.jsonl"
    good.write_text("\n".join(json.dumps(r) for r in HISTORY) + "\n\n")
    assert read_history(good) == HISTORY

    written = tmp_path / "written.jsonl"
    written.write_text(history_text(HISTORY[:3]), encoding="utf-8")
    append_history(written, HISTORY[3])
    assert read_history(written) == HISTORY

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(HISTORY[0]) + "\n{truncated\n")
    with pytest.raises(DataError, match=r"bad\.jsonl: line 2"):
        read_history(bad)


def test_training_curves_plot_each_series_where_it_was_recorded(tmp_path):
    path = tmp_path / "plots" / "curves.png"

    series = plot_training_curves(HISTORY, path)

    assert series["loss"] == ([1, 2, 3, 4], [2.0, 1.5, 1.2, 1.0])
    # Validation entries only at epoch ends, under either name.
    assert series["validation_loss"] == ([2, 4], [1.6, 1.1])
    assert series["lr"] == ([1, 2, 3, 4], [1e-4, 2e-4, 1e-4, 0.0])
    assert series["head_lr"] == ([1, 2, 3], [1e-3, 2e-3, 1e-3])
    assert_png(path)
    marked = tmp_path / "plots" / "marked.png"
    plot_training_curves(HISTORY, marked, exported_step=2)
    assert_png(marked)
    assert marked.read_bytes() != path.read_bytes()


def test_confusion_keeps_the_most_frequent_classes_and_folds_the_rest():
    labels = ["A", "B", "C", "D"]
    y_true = np.array([0, 0, 0, 1, 1, 2, 3])
    y_pred = np.array([0, 1, 0, 1, 2, 2, 0])

    matrix = grouped_confusion(y_true, y_pred, labels, top_n=2)

    assert matrix.labels == ["A", "B", OTHER]
    # Rows true, columns predicted. C→C and D→A: one in (other)/(other), one in (other)/A.
    assert matrix.counts.tolist() == [[2, 1, 0], [0, 1, 1], [1, 0, 1]]
    assert np.allclose(matrix.normalised, [[2 / 3, 1 / 3, 0], [0, 0.5, 0.5], [0.5, 0, 0.5]])


def test_confusion_has_no_other_group_when_nothing_lands_there():
    matrix = grouped_confusion(np.array([1, 1, 0]), np.array([1, 0, 0]), ["A", "B", "C"], 5)

    # Most frequent first; C has no sample and is never predicted.
    assert matrix.labels == ["B", "A"]
    assert matrix.counts.tolist() == [[1, 1], [0, 1]]


def test_a_class_only_ever_predicted_gets_an_empty_row_not_nan():
    matrix = grouped_confusion(np.array([0, 0]), np.array([0, 1]), ["A", "B"], 5)

    assert matrix.labels == ["A", OTHER]
    assert matrix.normalised.tolist() == [[0.5, 0.5], [0.0, 0.0]]


def test_confusion_matrix_plot_returns_row_normalised_shares(tmp_path):
    rng = np.random.default_rng(0)
    labels = [f"Class{i}WithAVeryLongGaapConceptNameNoncurrent" for i in range(30)]
    y_true = rng.integers(0, 30, 500)
    y_pred = np.where(rng.random(500) < 0.7, y_true, rng.integers(0, 30, 500))
    path = tmp_path / "confusion.png"

    matrix = plot_confusion_matrix(y_true, y_pred, labels, path, top_n=10)

    assert len(matrix.labels) == 11
    assert matrix.counts.sum() == 500
    assert np.allclose(matrix.normalised.sum(axis=1), 1)
    assert_png(path)


def test_long_labels_keep_their_start_and_end():
    label = "AccumulatedOtherComprehensiveIncomeLossNetOfTaxNoncurrent"

    short = short_label(label, width=32)

    assert len(short) == 32
    assert short.startswith("AccumulatedOther")
    assert short.endswith("Noncurrent")
    assert short_label("Cash", width=32) == "Cash"


def metrics_for(y_true, y_pred, labels):
    probabilities = np.eye(len(labels))[y_pred]
    return classification_metrics(np.array(y_true), probabilities, labels)


LABELS = ["A", "B", "C", "D"]
MODEL = metrics_for([0, 0, 0, 1, 1, 2], [0, 0, 0, 1, 1, 1], LABELS)
BASELINE = metrics_for([0, 0, 0, 1, 1, 2], [0, 1, 0, 1, 0, 2], LABELS)


def test_f1_against_support_shows_each_class_with_samples(tmp_path):
    path = tmp_path / "f1.png"

    points = plot_f1_vs_support(
        {"fine-tuned": MODEL["per_class"], "baseline": BASELINE["per_class"]}, path
    )

    support, f1 = points["fine-tuned"]
    # D has no sample: left out. A 1.0, B 2·2/(2+3) = 0.8, C never predicted = 0.
    assert support.tolist() == [3, 2, 1]
    assert f1 == pytest.approx([1.0, 0.8, 0.0])
    assert points["baseline"][1].mean() == pytest.approx(BASELINE["macro_f1"])
    assert_png(path)


def test_baseline_comparison_plots_the_four_scores_of_each_split(tmp_path):
    path = tmp_path / "comparison.png"
    empty = metrics_for([], np.zeros(0, dtype=int), LABELS)

    values = plot_baseline_comparison(
        {
            "fine-tuned": {"validation": MODEL, "test": MODEL},
            "baseline": {"validation": BASELINE, "test": empty, "train_seconds": 1.0},
        },
        path,
    )

    keys = ("accuracy", "macro_f1", "weighted_f1", "top_3_accuracy")
    assert values["validation"]["fine-tuned"] == [MODEL[k] for k in keys]
    assert values["validation"]["baseline"] == [BASELINE[k] for k in keys]
    assert values["test"]["baseline"] == [None] * 4
    assert_png(path)
