"""Ledger rules: learn from the labelled records the keys (review.rules.columns) always booked
to one account, at least review.rules.min_bookings times, and replay them date by date on the
same records to see whether they may post: trusted when the lower bound of their precision
reaches review.target_precision at review.confidence_level (see
`account_tax.evaluation.ledger_rules`). Predict shows each record's rule and posts the
suggestions a trusted rule confirms."""

import logging
from pathlib import Path

import polars as pl

from account_tax import cli
from account_tax.data.spec import DataSpec
from account_tax.evaluation.assessment import ReviewSettings
from account_tax.evaluation.ledger_rules import learn_rules, report, rule_columns
from account_tax.io import write_json, write_parquet
from account_tax.stage_log import log_stage

log = logging.getLogger("ledger_rules")


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--input", type=Path, required=True, help="labelled records Parquet")
    parser.add_argument("--rules", type=Path, required=True, help="learned rules Parquet")
    parser.add_argument("--report", type=Path, required=True, help="the rules' replay JSON")
    args = parser.parse_args()
    spec = DataSpec.from_config(args.settings)
    review = ReviewSettings.of(args.settings["review"])
    settings = review.rules
    columns = rule_columns(spec, settings)
    records = pl.scan_parquet(args.input)
    rules = learn_rules(records, columns, spec.label, settings.min_bookings)
    replay = report(
        records,
        spec.label,
        spec.date[0],
        settings,
        review.target_precision,
        review.confidence_level,
    )
    write_parquet(rules, args.rules)
    write_json(args.report, {"rules": rules.height, **replay})
    log.info("%d rules learned; replayed on the records: %s", rules.height, replay)
    log_stage(
        args.tracking,
        "ledger_rules",
        {
            "rules": rules.height,
            "replay_matched": replay["matched"],
            "replay_right": replay["right"],
            "lower_bound": replay["lower_bound"],
            "trusted": float(replay["trusted"]),
        },
        [args.report],
    )


if __name__ == "__main__":
    cli.run(main)
