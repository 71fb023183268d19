"""Choose a sweep's trial: the one whose exported model has the highest validation macro-F1.
Writes its train settings (the config the train rule then resumes with), a table of every trial
and a plot of validation macro-F1 against each swept setting."""

from pathlib import Path

from account_tax import cli
from account_tax.stage_log import log_stage
from account_tax.training.sweep import SELECTED_BY, SelectPaths, select


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--trial-metrics", type=Path, nargs="+", required=True, help="each trial's metrics.json"
    )
    parser.add_argument("--selected", type=Path, required=True, help="chosen settings (JSON)")
    parser.add_argument("--trials-table", type=Path, required=True, help="every trial (TSV)")
    parser.add_argument("--plot", type=Path, required=True, help="validation macro-F1 plot")
    args = parser.parse_args()
    paths = SelectPaths(
        trial_metrics=args.trial_metrics,
        selected=args.selected,
        trials_table=args.trials_table,
        plot=args.plot,
    )
    chosen, rows = select(args.settings, paths)
    best = next(row for row in rows if row["trial"] == chosen.name)
    log_stage(
        args.tracking,
        "sweep",
        {"trials": len(rows), f"chosen_{SELECTED_BY}": best[SELECTED_BY]},
        [args.trials_table, args.plot],
        tags={"chosen": chosen.name},
    )


if __name__ == "__main__":
    cli.run(main)
