"""Resources: each rule's wall time and peak memory, from Snakemake's `benchmark:` files, as a
table and a plot for the report (the same numbers go to the MLflow run)."""

from pathlib import Path

from account_tax import cli
from account_tax.rule_resources import benchmarks
from account_tax.tracking.resources import plot_resources


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--benchmarks", type=Path, required=True, help="benchmark folder")
    parser.add_argument("--table", type=Path, required=True, help="TSV to write")
    parser.add_argument("--plot", type=Path, required=True, help="PNG to write")
    args = parser.parse_args()
    numbers = {rule: values for rule, (_, values) in benchmarks(args.benchmarks).items()}
    args.table.parent.mkdir(parents=True, exist_ok=True)
    lines = ["rule\twall_s\tmax_rss_mb"]
    lines += [f"{rule}\t{v['wall_s']:.2f}\t{v['max_rss_mb']:.1f}" for rule, v in numbers.items()]
    args.table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    plot_resources(
        {rule: v["wall_s"] for rule, v in numbers.items()},
        {rule: v["max_rss_mb"] for rule, v in numbers.items()},
        args.plot,
    )


if __name__ == "__main__":
    cli.run(main)
