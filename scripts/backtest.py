"""Backtest, one variant: the whole workflow replayed period by period (see
account_tax.backtest.replay); one row of figures per period."""

from pathlib import Path

from account_tax import cli
from account_tax.backtest.periods import BacktestSettings, dated_records
from account_tax.backtest.replay import replay
from account_tax.data.spec import DataSpec
from account_tax.stage_log import log_stage


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--raw", type=Path, required=True, help="ingest's records (as read)")
    parser.add_argument("--records", type=Path, required=True, help="the labelled records")
    parser.add_argument("--output", type=Path, required=True, help="per-period figures (TSV)")
    parser.add_argument("--runs", type=Path, required=True, help="one workflow folder per period")
    parser.add_argument("--variant", required=True, help="a name in backtest.variants")
    parser.add_argument("--snakefile", type=Path, required=True, help="the workflow's Snakefile")
    parser.add_argument("--cores", type=int, required=True, help="cores of each period's run")
    args = parser.parse_args()
    settings = BacktestSettings.of(args.settings["backtest"])
    spec = DataSpec.from_config(args.settings)
    table = replay(
        config=args.settings,
        records=dated_records(args.raw, args.records, spec, settings),
        settings=settings,
        variant=settings.variant(args.variant),
        snakefile=args.snakefile,
        folder=args.runs,
        cores=args.cores,
    )
    table.write_csv(args.output, separator="\t")
    log_stage(
        args.tracking,
        f"backtest/{args.variant}",
        {
            f"{row['period']}/{name}": row[name]
            for row in table.iter_rows(named=True)
            for name in (
                "auto_share",
                "posted_precision",
                "hindsight_auto_share",
                "review_rows",
                "cpu_minutes",
            )
            if row[name] is not None
        },
        [args.output],
    )


if __name__ == "__main__":
    cli.run(main)
