"""The resources each rule used (Snakemake's benchmark files) as a plot for the report."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first


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
