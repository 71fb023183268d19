"""Plots of training and evaluation, for the report: loss and learning-rate curves, a confusion
matrix of the most frequent classes, per-class F1 against support, and the baseline comparison.

Each function takes plain data (the history records, label-id arrays, the dicts written by
`account_tax.evaluation.metrics`), writes one PNG and returns the numbers it plotted, so they can
be checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from sklearn.metrics import confusion_matrix

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first

from account_tax.evaluation.metrics import TOP_K, TOP_K_ACCURACY

# The training loop writes `validation_loss`; `val_loss` is the shorter name other tools use.
VALIDATION_LOSS_KEYS = ("validation_loss", "val_loss")
OTHER = "(other)"
COMPARED_METRICS = {
    "accuracy": "accuracy",
    "macro_f1": "macro-F1",
    "weighted_f1": "weighted-F1",
    TOP_K_ACCURACY: f"top-{TOP_K} accuracy",
}
MODEL_MARKERS = ("o", "x", "s", "^")


def _save(fig: plt.Figure, path: Path) -> None:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def plot_nothing(path: Path, why: str) -> None:
    """A figure that says why there is nothing to plot: the report still has its place."""
    fig, ax = plt.subplots(figsize=(7, 2), dpi=100)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    ax.set_axis_off()
    _save(fig, path)


def short_label(label: str, width: int = 36) -> str:
    """Long class names cut in the middle: the start and the end (`...Current` against
    `...Noncurrent`) are what tells two accounts apart."""
    if len(label) <= width:
        return label
    head = (width - 1) * 3 // 5
    return f"{label[:head]}…{label[-(width - 1 - head) :]}"


def history_series(history: Sequence[Mapping[str, Any]]) -> dict[str, tuple[list, list]]:
    """(steps, values) of the train loss, the validation loss and the learning rate.

    A record contributes to a series only if it has that key: validation entries come only at
    the end of an epoch.
    """

    def series(keys: tuple[str, ...]) -> tuple[list, list]:
        points = [
            (record["step"], record[key])
            for record in history
            for key in keys
            if record.get(key) is not None
        ]
        return [step for step, _ in points], [value for _, value in points]

    return {
        "loss": series(("loss",)),
        "validation_loss": series(VALIDATION_LOSS_KEYS),
        "lr": series(("lr",)),
        "head_lr": series(("head_lr",)),
    }


def plot_training_curves(
    history: Sequence[Mapping[str, Any]], path: Path, exported_step: int | None = None
) -> dict[str, tuple[list, list]]:
    """Train loss per step with validation loss on top, and the learning-rate schedules below;
    a dashed line at the step whose model was exported (train.early_stopping)."""
    series = history_series(history)
    fig, (loss_ax, lr_ax) = plt.subplots(2, 1, sharex=True, figsize=(9, 6), dpi=100)
    loss_ax.plot(*series["loss"], color="#4C72B0", linewidth=1, label="train loss (per step)")
    loss_ax.plot(
        *series["validation_loss"], "o-", color="#DD8452", label="validation loss (per epoch)"
    )
    loss_ax.set_ylabel("loss")
    loss_ax.set_title("Training curves")
    loss_ax.legend()
    loss_ax.grid(alpha=0.3)
    lr_ax.plot(*series["lr"], color="#55A868", label="adapters (or all weights)")
    lr_ax.plot(*series["head_lr"], color="#8172B3", label="head, modules trained in full")
    lr_ax.legend()
    lr_ax.set_xlabel("optimizer step")
    lr_ax.set_ylabel("learning rate")
    lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    lr_ax.grid(alpha=0.3)
    if exported_step is not None:
        for axis in (loss_ax, lr_ax):
            axis.axvline(exported_step, color="#555555", linestyle="--", linewidth=1)
        loss_ax.annotate(
            f" exported model (step {exported_step})",
            (exported_step, 1),
            xycoords=("data", "axes fraction"),
            va="top",
            fontsize=8,
        )
    _save(fig, path)
    return series


@dataclass(frozen=True)
class ConfusionMatrix:
    """Counts with true classes as rows and predicted classes as columns, in `labels` order."""

    labels: list[str]
    counts: np.ndarray

    @property
    def normalised(self) -> np.ndarray:
        """Each row divided by its total: the share of a true class predicted as each column.
        A row without samples (a class only ever predicted) stays all zero."""
        totals = self.counts.sum(axis=1, keepdims=True)
        return np.divide(self.counts, totals, out=np.zeros(self.counts.shape), where=totals > 0)


def grouped_confusion(
    y_true: np.ndarray, y_pred: np.ndarray, labels: Sequence[str], top_n: int
) -> ConfusionMatrix:
    """The `top_n` classes with most samples in `y_true` (ties to the lower label id), every
    other class folded into one `(other)` row and column, shown only when something lands there.

    The `(other)`/`(other)` cell mixes right answers with confusions among the folded classes.
    """
    y_true = np.asarray(y_true, dtype=np.int64)
    y_pred = np.asarray(y_pred, dtype=np.int64)
    support = np.bincount(y_true, minlength=len(labels))
    ranked = np.argsort(-support, kind="stable")[:top_n]
    top = ranked[support[ranked] > 0]
    # Position of every label id in the matrix; the folded ones share the last position.
    position = np.full(len(labels), len(top))
    position[top] = np.arange(len(top))
    if not len(y_true):
        return ConfusionMatrix([], np.zeros((0, 0), dtype=np.int64))
    counts = confusion_matrix(
        position[y_true], position[y_pred], labels=np.arange(len(top) + 1)
    ).astype(np.int64)
    names = [labels[i] for i in top]
    if counts[-1].any() or counts[:, -1].any():
        return ConfusionMatrix([*names, OTHER], counts)
    return ConfusionMatrix(names, counts[:-1, :-1])


def plot_confusion_matrix(
    y_true: np.ndarray,
    y_pred: np.ndarray,
    labels: Sequence[str],
    path: Path,
    top_n: int = 20,
    title: str = "Confusion matrix",
) -> ConfusionMatrix:
    """Row-normalised confusion matrix of the most frequent classes (see `grouped_confusion`),
    with the share in each cell and each row's sample count beside its label."""
    matrix = grouped_confusion(y_true, y_pred, labels, top_n)
    shares = matrix.normalised
    size = len(matrix.labels)
    side = max(6.0, 0.45 * size + 3)
    fig, ax = plt.subplots(figsize=(side + 1.5, side), dpi=100)
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the true class")
    names = [short_label(label) for label in matrix.labels]
    rows = matrix.counts.sum(axis=1)
    ax.set_xticks(range(size), names, rotation=90, fontsize=8)
    ax.set_yticks(range(size), [f"{n} ({r})" for n, r in zip(names, rows, strict=True)], fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true (samples)")
    for (row, column), share in np.ndenumerate(shares):
        if share >= 0.005:
            ax.text(
                column,
                row,
                f"{share:.0%}",
                ha="center",
                va="center",
                fontsize=7,
                color="white" if share > 0.6 else "black",
            )
    shown = size - (OTHER in matrix.labels)
    folded = f" and {OTHER}" if OTHER in matrix.labels else ""
    ax.set_title(f"{title}: {shown} most frequent classes{folded}, rows sum to 100%")
    _save(fig, path)
    return matrix


def f1_support_points(per_class: Mapping[str, Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(support, F1) of the classes with samples; the others have no F1 against support."""
    present = [entry for entry in per_class.values() if entry["support"] > 0]
    return (
        np.array([entry["support"] for entry in present], dtype=np.int64),
        np.array([entry["f1"] for entry in present], dtype=np.float64),
    )


def plot_f1_vs_support(
    per_class_by_model: Mapping[str, Mapping[str, Mapping[str, Any]]],
    path: Path,
    title: str = "Per-class F1 against support",
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One point per class and model (e.g. {"fine-tuned": per_class, "baseline": per_class},
    each the `per_class` of `classification_metrics`), support on a log axis; a dashed line at
    each model's mean, its macro-F1.

    Many classes share a support, so each model's points are nudged sideways by a few percent
    to stay visible; the returned points are the exact ones.
    """
    points = {name: f1_support_points(per_class) for name, per_class in per_class_by_model.items()}
    fig, ax = plt.subplots(figsize=(9, 5), dpi=100)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (name, (support, f1)) in enumerate(points.items()):
        nudge = 10 ** (0.03 * (index - (len(points) - 1) / 2))
        colour = colours[index % len(colours)]
        ax.scatter(
            support * nudge,
            f1,
            marker=MODEL_MARKERS[index % len(MODEL_MARKERS)],
            color=colour,
            alpha=0.6,
            s=20,
            label=f"{name} (macro-F1 {f1.mean():.3f} over {len(f1)} classes)" if len(f1) else name,
        )
        if len(f1):
            ax.axhline(f1.mean(), color=colour, linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("support: samples of the class in the split (log scale)")
    ax.set_ylabel("F1")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, path)
    return points


def plot_baseline_comparison(
    metrics_by_model: Mapping[str, Mapping[str, Mapping[str, Any]]],
    path: Path,
    splits: Sequence[str] = ("validation", "test"),
) -> dict[str, dict[str, list[float | None]]]:
    """Accuracy, macro-F1, weighted-F1 and top-k accuracy side by side, one panel per split.

    `metrics_by_model` maps a model name to its metrics per split, e.g.
    {"fine-tuned": {"validation": m, "test": m}, "baseline": json.load(baseline metrics)}.
    Returns split -> model -> values in `COMPARED_METRICS` order; a missing split or an
    undefined score (empty split) is None and drawn as "n/a".
    """
    values = {
        split: {
            name: [(metrics.get(split) or {}).get(key) for key in COMPARED_METRICS]
            for name, metrics in metrics_by_model.items()
        }
        for split in splits
    }
    fig, axes = plt.subplots(
        1, len(splits), figsize=(6 * len(splits), 4.5), dpi=100, sharey=True, squeeze=False
    )
    width = 0.8 / max(len(metrics_by_model), 1)
    for ax, split in zip(axes[0], splits, strict=True):
        for index, (name, scores) in enumerate(values[split].items()):
            offsets = np.arange(len(COMPARED_METRICS)) + (index + 0.5) * width - 0.4
            heights = [score if score is not None else 0.0 for score in scores]
            bars = ax.bar(offsets, heights, width, label=name)
            texts = [f"{score:.3f}" if score is not None else "n/a" for score in scores]
            ax.bar_label(bars, texts, fontsize=7, padding=2)
        ax.set_xticks(range(len(COMPARED_METRICS)), list(COMPARED_METRICS.values()))
        ax.set_ylim(0, 1.2)  # headroom for the value labels and the legend
        ax.set_yticks(np.linspace(0, 1, 6))
        ax.set_title(split)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("score")
    axes[0][-1].legend(loc="upper right", ncols=len(metrics_by_model), fontsize=8)
    _save(fig, path)
    return values


def plot_reliability(curves: Mapping[str, Mapping[str, Any]], path: Path) -> dict[str, list]:
    """Reliability diagram of the test split: per model, accuracy against mean confidence in
    equal-mass bins, calibrated (solid) and raw (dashed); the diagonal is perfect calibration.
    Returns model -> [(confidence, accuracy)] of the calibrated bins."""
    fig, ax = plt.subplots(figsize=(6, 5.5), dpi=100)
    ax.plot([0, 1], [0, 1], color="grey", linewidth=1, label="perfectly calibrated")
    points = {}
    for index, (name, curve) in enumerate(curves.items()):
        color = f"C{index}"
        for key, style, suffix in (("reliability", "-", ""), ("reliability_before", "--", " raw")):
            bins = curve[key]
            xs, ys = [b["confidence"] for b in bins], [b["accuracy"] for b in bins]
            ax.plot(xs, ys, style, marker=MODEL_MARKERS[index], color=color, label=name + suffix)
        points[name] = [(b["confidence"], b["accuracy"]) for b in curve["reliability"]]
    ax.set_xlabel("confidence (top-1 probability), bin mean")
    ax.set_ylabel("accuracy in bin")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_title("Reliability on test (15 equal-mass bins)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    _save(fig, path)
    return points


def plot_precision_coverage(
    curves: Mapping[str, Mapping[str, Any]],
    reviews: Mapping[str, Mapping[str, Any]],
    path: Path,
) -> dict[str, tuple[float | None, float | None]]:
    """Precision of the rows posted automatically against the share posted (test split), as the
    threshold goes down, per model; the target precision as a line and each model's threshold
    (chosen on validation) as a point. Returns model -> (coverage, precision) at its threshold."""
    fig, ax = plt.subplots(figsize=(7, 5), dpi=100)
    chosen = {}
    for index, (name, curve) in enumerate(curves.items()):
        ax.plot(curve["coverage"], curve["precision"], color=f"C{index}", label=name)
        test = reviews[name]["test"]
        chosen[name] = (test["coverage"], test["precision"])
        if test["precision"] is not None:
            ax.plot(
                test["coverage"],
                test["precision"],
                MODEL_MARKERS[index],
                color=f"C{index}",
                markersize=9,
                label=f"{name}: threshold {reviews[name]['threshold']:.3f}",
            )
    target = next(iter(reviews.values()))["target_precision"]
    ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target}")
    ax.set_xlabel("coverage (share of test rows posted automatically)")
    ax.set_ylabel("precision of the posted rows")
    ax.set_xlim(0, 1.02)
    ax.set_title("Auto-post: precision against coverage on test")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    _save(fig, path)
    return chosen
