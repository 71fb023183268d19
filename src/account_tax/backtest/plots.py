"""The report's picture of a backtest: per period, the share of records posted automatically (and
what the best threshold in hindsight would have posted) and the records left to people, one
colour per variant."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib
import polars as pl

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first

from account_tax.backtest.periods import PERIOD


def plot_backtest(tables: Mapping[str, pl.DataFrame], target_precision: float, path: Path) -> None:
    fig, (share, review) = plt.subplots(1, 2, figsize=(10, 3.6), sharex=True)
    for name, table in tables.items():
        periods = table[PERIOD].to_list()
        (line,) = share.plot(periods, table["auto_share"].to_list(), marker="o", label=name)
        share.plot(
            periods,
            table["hindsight_auto_share"].to_list(),
            linestyle="--",
            color=line.get_color(),
            label=f"{name}, best threshold in hindsight",
        )
        review.plot(periods, table["review_rows"].to_list(), marker="o", label=name)
    share.set_ylabel("share posted automatically")
    share.set_ylim(0, 1)
    share.set_title(f"auto-post at precision >= {target_precision:g}")
    review.set_ylabel("records left to review")
    review.set_title("work left to people")
    for axis in (share, review):
        axis.set_xlabel(PERIOD)
        axis.tick_params(axis="x", rotation=45)
        axis.grid(alpha=0.3)
    share.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
