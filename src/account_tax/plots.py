"""Plots of the data stages and of the resources each rule used, for `snakemake --report`."""

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


def plot_resources(wall_s: dict[str, float], max_rss_mb: dict[str, float], path: Path) -> None:
    """Wall time and peak memory per rule, side by side, rules in workflow order."""
    rules = list(wall_s)
    fig, (time_ax, memory_ax) = plt.subplots(
        1, 2, figsize=(10, 0.35 * len(rules) + 1.5), dpi=100, sharey=True
    )
    time_ax.barh(rules, [wall_s[r] for r in rules], color="#4C72B0")
    time_ax.set_xlabel("wall time (s)")
    memory_ax.barh(rules, [max_rss_mb[r] for r in rules], color="#DD8452")
    memory_ax.set_xlabel("peak resident memory (MB)")
    time_ax.invert_yaxis()
    fig.suptitle("Wall time and peak memory per rule (Snakemake benchmark files)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
