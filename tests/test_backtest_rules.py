"""bench/backtest_rules.py: rules from the labelled records of each period's run, matched on the
given columns after the workflow's cleaning, the latest record's account winning."""

import datetime
import sys

import polars as pl
import pytest
import yaml
from backtest_rules import LABELLED, PREDICTED, main, period_rules


def period_run(folder, labelled: list[dict], period: list[dict]):
    folder.mkdir(parents=True)
    config = {
        "data": {"columns": {"label": "account", "date": ["date"]}},
        "clean": {"case": "lower"},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    for path, rows in ((LABELLED, labelled), (PREDICTED, period)):
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        pl.DataFrame(rows).write_parquet(folder / path)


def labelled(vendor: str, memo: str, account: str, day: int) -> dict:
    date = datetime.date(2024, 1, day)
    return {"vendor": vendor, "memo": memo, "account": account, "date": date}


def booked(vendor: str, memo: str, account: str) -> dict:
    return {"vendor": vendor, "memo": memo, "account": account}


@pytest.fixture
def backtest(tmp_path):
    runs = tmp_path / "backtest" / "loop" / "runs"
    # Acme's rent was moved from 4210 to 4211 on the 20th: the later record makes the rule.
    period_run(
        runs / "01-2024-02",
        [
            labelled("acme", "rent", "4211", 20),
            labelled("acme", "rent", "4210", 3),
            labelled("globex", "fees", "1800", 5),
        ],
        [
            booked("Acme", "Rent", "4211"),  # the period's records as given, before cleaning
            booked("ACME", "rent", "4211"),
            booked("Globex", "fees", "1800"),
            booked("Initech", "fees", "1800"),  # no rule
        ],
    )
    period_run(
        runs / "02-2024-03",
        [labelled("globex", "fees", "1800", 5)],
        # Globex's fees went to another account this month: the rule is wrong once.
        [booked("Globex", "FEES", "1800"), booked("Globex", "fees", "1801")],
    )
    return tmp_path / "backtest", runs


def test_the_latest_record_makes_the_rule_and_records_match_as_cleaned(backtest):
    _, runs = backtest
    assert period_rules(runs / "01-2024-02", ["vendor", "memo"]) == {
        "rows": 4,
        "matched": 3,
        "right": 3,
    }
    assert period_rules(runs / "01-2024-02", ["memo"]) == {"rows": 4, "matched": 4, "right": 4}
    assert period_rules(runs / "02-2024-03", ["vendor", "memo"]) == {
        "rows": 2,
        "matched": 2,
        "right": 1,
    }


def test_the_periods_are_pooled_with_the_auto_post_rules_lower_bound(backtest, monkeypatch, capsys):
    folder, _ = backtest
    command = ["backtest_rules.py", str(folder), "--columns", "vendor", "memo"]
    monkeypatch.setattr(sys, "argv", command)
    main()
    pooled = capsys.readouterr().out.splitlines()[-1]
    # The one-sided 95 % Clopper-Pearson bound of 4 right in 5 is 0.343.
    assert pooled.startswith("pooled: 5 of 6 records matched (83.3%), 4 right (80.0%")
    assert pooled.endswith("lower bound at 0.95: 0.343")
