"""Ledger rules: learned from the labelled records, replayed on them date by date, trusted only
when the replay's lower bound reaches the target, and confirming suggestions in predict."""

import datetime
import random

import numpy as np
import polars as pl
import pytest
from sample_ledger import LEDGER_COLUMNS, ledger_spec

from account_tax.errors import DataError
from account_tax.evaluation.ledger_rules import (
    RULE_ACCOUNT,
    RULE_BOOKINGS,
    LedgerRules,
    RuleSettings,
    learn_rules,
    replayed,
    report,
    rule_columns,
)
from account_tax.evaluation.review import AUTO, REVIEW, decisions


def day(n: int) -> datetime.date:
    return datetime.date(2024, 1, 1) + datetime.timedelta(days=n)


def records(rows: list[tuple[str | None, int, str]]) -> pl.LazyFrame:
    """(vendor, day, account) rows as cleaned, labelled records."""
    return pl.LazyFrame(
        [{"vendor": v, "date": day(d), "account": a} for v, d, a in rows],
        schema={"vendor": pl.String, "date": pl.Date, "account": pl.String},
    )


def test_a_rule_is_a_key_booked_often_enough_and_always_to_one_account():
    ledger = records(
        [
            ("acme", 0, "4930"),
            ("acme", 1, "4930"),
            ("globex", 0, "4210"),
            ("globex", 1, "1800"),
            ("initech", 0, "4400"),
            (None, 0, "4400"),
            (None, 1, "4400"),
        ]
    )
    rules = learn_rules(ledger, ["vendor"], "account", min_bookings=2)
    assert rules.to_dicts() == [{"vendor": "acme", RULE_ACCOUNT: "4930", RULE_BOOKINGS: 2}]
    # From one booking initech has a rule; a record without the key never makes one.
    rules = learn_rules(ledger, ["vendor"], "account", min_bookings=1)
    assert rules["vendor"].to_list() == ["acme", "initech"]


def brute_force_replay(rows, min_bookings):
    """Each record against the rules of the records of strictly earlier dates, one at a time."""
    matched = right = 0
    for vendor, date, account in rows:
        if vendor is None:
            continue
        before = [a for v, d, a in rows if v == vendor and d < date]
        if len(before) >= min_bookings and len(set(before)) == 1:
            matched += 1
            right += before[0] == account
    return matched, right


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("min_bookings", [1, 2, 3])
def test_the_replay_matches_each_record_against_the_rules_of_earlier_dates_only(seed, min_bookings):
    generator = random.Random(seed)
    rows = [
        (
            generator.choice(["a", "b", "c", None]),
            generator.randrange(12),
            generator.choice(["4930", "4930", "4930", "4210"]),
        )
        for _ in range(80)
    ]
    counts = replayed(records(rows), ["vendor"], "account", "date", min_bookings)
    matched, right = brute_force_replay(rows, min_bookings)
    assert (counts["matched"], counts["right"]) == (matched, right)
    assert counts["dated_records"] == sum(v is not None for v, _, _ in rows)


def test_a_second_account_ends_the_rule_from_the_next_date_on():
    ledger = records(
        [
            ("acme", 0, "4930"),
            ("acme", 1, "4930"),
            ("acme", 2, "4930"),  # two earlier bookings: matched, right
            ("acme", 2, "4930"),  # the same date: matched, right (the rule of days 0 and 1)
            ("acme", 3, "4400"),  # matched, wrong: the rule still held before day 3
            ("acme", 4, "4930"),  # two accounts before day 4: no rule
        ]
    )
    assert replayed(ledger, ["vendor"], "account", "date", 2) == {
        "dated_records": 6,
        "matched": 3,
        "right": 2,
    }


def test_rules_are_trusted_only_when_the_replays_lower_bound_reaches_the_target():
    settings = RuleSettings.of({"columns": ["vendor"]})
    # acme: 30 dates of one account; from the third date on each record is matched and right.
    ledger = records([("acme", d, "4930") for d in range(30)])
    trusted = report(ledger, "account", "date", settings, 0.9, 0.95)
    assert (trusted["matched"], trusted["right"]) == (28, 28)
    # 28 of 28 right: the one-sided 95 % lower bound is 0.05 ** (1 / 28) = 0.899.
    assert trusted["lower_bound"] == pytest.approx(0.05 ** (1 / 28))
    assert not trusted["trusted"]
    assert report(ledger, "account", "date", settings, 0.89, 0.95)["trusted"]
    one = records([("acme", 0, "4930")])
    empty = report(one, "account", "date", settings, 0.5, 0.5)
    assert (empty["matched"], empty["precision"], empty["trusted"]) == (0, None, False)


def test_rule_columns_must_be_read_and_dated(tmp_path):
    spec = ledger_spec(tmp_path / "ledger.csv")
    assert rule_columns(spec, RuleSettings.of({"columns": ["vendor"]})) == ["vendor"]
    for unread in ("payee", "account"):
        with pytest.raises(DataError, match=rf"review.rules.columns: \['{unread}'\] not among"):
            rule_columns(spec, RuleSettings.of({"columns": ["vendor", unread]}))
    undated = ledger_spec(tmp_path / "ledger.csv", columns=LEDGER_COLUMNS | {"date": []})
    assert rule_columns(undated, RuleSettings.of({})) == []
    with pytest.raises(DataError, match="no date column"):
        rule_columns(undated, RuleSettings.of({"columns": ["vendor"]}))


def test_records_are_matched_in_their_order_keys_compared_as_strings():
    rules = pl.DataFrame(
        {"vendor": ["acme"], "tax_code": ["19"], RULE_ACCOUNT: ["4930"], RULE_BOOKINGS: [3]}
    )
    new = pl.LazyFrame({"vendor": ["globex", "acme", "acme", None], "tax_code": [19, 19, 7, 19]})
    matched = LedgerRules(rules, trusted=True).matched(new).collect()
    assert matched.columns == [RULE_ACCOUNT, RULE_BOOKINGS]
    assert matched[RULE_ACCOUNT].to_list() == [None, "4930", None, None]
    assert matched[RULE_BOOKINGS].to_list() == [None, 3, None, None]


def test_a_confirmed_suggestion_is_posted_below_the_threshold_but_never_when_novel():
    confidence = np.array([0.2, 0.2, 0.9, 0.2])
    confirmed = np.array([True, False, False, True])
    novel = np.array([False, False, False, True])
    assert decisions(confidence, 0.8, novel, confirmed).tolist() == [AUTO, REVIEW, AUTO, REVIEW]
    assert decisions(confidence, None, novel, confirmed).tolist() == [AUTO, REVIEW, REVIEW, REVIEW]
