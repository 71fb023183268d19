"""What rules learned from the reviewed records would post in a finished backtest: the rules that
ledger tools (hledger's and Firefly III's) have people write, taken from the ledger instead.

A period's record that matches an earlier labelled record on every one of `--columns` (cleaned
as the workflow cleans them, `normalise_text`) gets the account of the latest such record (by the
date column); the rest get nothing. Per period: how many records a rule matched, and how often its
account was the one booked; pooled over the periods, the share right with its exact 95 %
interval and the one-sided 95 % lower bound that the auto-post rule asks of a threshold
(`review.confidence_level` 0.95): above `review.target_precision`, such rules could post unseen.
The labelled records are each period run's (the ledger with the corrections that reached it,
results/features/records.parquet), so a rule knows what the variant's reviewers had said.

Example: python bench/backtest_rules.py results/backtest --variant loop --columns flight departs
"""

import argparse
from pathlib import Path

import polars as pl
import yaml
from scipy.stats import binomtest

from account_tax.data.clean import normalise_text
from account_tax.evaluation.review import precision_lower_bound

LABELLED = "results/features/records.parquet"
PREDICTED = "results/predict/period.parquet"
LEVEL = 0.95
RULE_ACCOUNT = "rule_account"


def period_rules(workdir: Path, columns: list[str]) -> dict[str, int]:
    """The period's records, those a rule matched, and those it matched with the booked account."""
    config = yaml.safe_load((workdir / "config.yaml").read_text(encoding="utf-8"))
    label, date = config["data"]["columns"]["label"], config["data"]["columns"]["date"][0]
    cleaned = [
        normalise_text(pl.col(column).cast(pl.String), config["clean"]["case"]).alias(column)
        for column in columns
    ]
    rules = (
        pl.read_parquet(workdir / LABELLED)
        .sort(date, maintain_order=True)
        .group_by(columns)
        .agg(pl.col(label).last().alias(RULE_ACCOUNT))
    )
    period = pl.read_parquet(workdir / PREDICTED).with_columns(cleaned)
    matched = period.join(rules, on=columns, how="inner")
    return {
        "rows": period.height,
        "matched": matched.height,
        "right": int((matched[RULE_ACCOUNT] == matched[label].cast(pl.String)).sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backtest", type=Path, help="a backtest's folder (results/backtest)")
    parser.add_argument("--variant", default="loop")
    parser.add_argument("--columns", nargs="+", required=True, help="the columns a rule matches")
    args = parser.parse_args()
    runs = sorted(p for p in (args.backtest / args.variant / "runs").iterdir() if p.is_dir())
    table = pl.DataFrame([{"period": run.name} | period_rules(run, args.columns) for run in runs])
    table = table.with_columns(
        (pl.col("matched") / pl.col("rows")).alias("matched_share"),
        (pl.col("right") / pl.col("matched")).alias("precision"),
    )
    with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True, float_precision=3):
        print(table)
    rows, matched, right = (int(table[column].sum()) for column in ("rows", "matched", "right"))
    if not matched:
        print(f"pooled: no rule matched any of {rows} records")
        return
    low, high = binomtest(right, matched).proportion_ci(confidence_level=LEVEL, method="exact")
    bound = float(precision_lower_bound(right, matched, LEVEL))
    print(
        f"pooled: {matched} of {rows} records matched ({matched / rows:.1%}), {right} right "
        f"({right / matched:.1%}, exact 95 % interval [{low:.1%}, {high:.1%}]); "
        f"lower bound at {LEVEL}: {bound:.3f}"
    )


if __name__ == "__main__":
    main()
