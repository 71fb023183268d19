"""Backtest summary: every variant's per-period figures in one table, and the plot of the share
posted automatically and the records left to review over the periods."""

from pathlib import Path

import polars as pl

from account_tax import cli
from account_tax.backtest.plots import plot_backtest
from account_tax.evaluation.assessment import ReviewSettings
from account_tax.stage_log import log_stage


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--variants", type=Path, nargs="+", required=True, help="periods.tsv each")
    parser.add_argument("--table", type=Path, required=True, help="all variants (TSV)")
    parser.add_argument("--plot", type=Path, required=True, help="the report's plot (PNG)")
    args = parser.parse_args()
    # results/backtest/<variant>/periods.tsv
    tables = {path.parent.name: pl.read_csv(path, separator="\t") for path in args.variants}
    combined = pl.concat(
        [table.select(pl.lit(name).alias("variant"), pl.all()) for name, table in tables.items()],
        how="diagonal_relaxed",
    )
    combined.write_csv(args.table, separator="\t")
    target = ReviewSettings.of(args.settings["review"]).target_precision
    plot_backtest(tables, target, args.plot)
    log_stage(args.tracking, "backtest", artifacts=[args.table, args.plot])


if __name__ == "__main__":
    cli.run(main)
