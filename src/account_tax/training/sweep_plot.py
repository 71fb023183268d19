"""The report's picture of a sweep: validation macro-F1 of every trial against each swept
setting, the chosen trial marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first


def _order(values: Sequence[str]) -> list[str]:
    """Distinct values, numbers by size, other values as first seen."""
    distinct = list(dict.fromkeys(values))
    try:
        return sorted(distinct, key=float)
    except ValueError:
        return distinct


def plot_trials(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str], metric: str, chosen: str, path: Path
) -> None:
    fig, axes = plt.subplots(
        1, len(keys), figsize=(3.2 * len(keys) + 1, 3.4), sharey=True, squeeze=False
    )
    for axis, key in zip(axes[0], keys, strict=True):
        order = _order([row[key] for row in rows])
        for row in rows:
            if row[metric] is None:
                continue
            best = row["trial"] == chosen
            axis.scatter(
                order.index(row[key]),
                row[metric],
                marker="*" if best else "o",
                s=160 if best else 40,
                color="tab:red" if best else "tab:blue",
                alpha=1.0 if best else 0.7,
                zorder=3 if best else 2,
            )
        axis.set_xticks(range(len(order)), order, rotation=30)
        axis.set_xlabel(key)
        axis.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("validation macro-F1 (exported epoch)")
    fig.suptitle(f"{len(rows)} trials; the chosen one is the red star")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
