"""Plots of the data stages for `snakemake --report`: classes after cleaning and the splits."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# Validation and test often have equal counts: different markers keep both visible.
SPLIT_STYLES = {
    "train": {"color": "#4C72B0", "marker": ".", "markersize": 5},
    "validation": {"color": "#DD8452", "marker": "o", "markersize": 6, "fillstyle": "none"},
    "test": {"color": "#55A868", "marker": "+", "markersize": 6},
}


def plot_class_distribution(counts: dict[str, int], path: Path, title: str) -> None:
    """Rows per class, largest first, log scale; classes without samples counted in the title."""
    ordered = sorted(counts.values(), reverse=True)
    empty = sum(1 for n in ordered if n == 0)
    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    ax.bar(range(len(ordered)), [max(n, 0.5) for n in ordered], width=1.0, color="#4C72B0")
    ax.set_yscale("log")
    ax.set_xlabel("class rank (largest first)")
    ax.set_ylabel("rows (log scale)")
    ax.set_title(f"{title}: {len(ordered)} classes, {empty} without samples, {sum(ordered)} rows")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def plot_split_distribution(per_class: dict[str, dict[str, int]], path: Path) -> None:
    """Rows per class in each split, classes ordered by total size: stratification at a glance."""
    labels = sorted(per_class, key=lambda label: -sum(per_class[label].values()))
    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    for split, style in SPLIT_STYLES.items():
        values = [max(per_class[label].get(split, 0), 0.5) for label in labels]
        ax.plot(range(len(labels)), values, linestyle="none", label=split, **style)
    ax.set_yscale("log")
    ax.set_xlabel("class rank (largest first)")
    ax.set_ylabel("rows (log scale; 0 shown at 0.5)")
    ax.set_title("Class distribution per split")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
