"""A small hand-made ledger for unit tests: rows, column roles and a matching config."""

from pathlib import Path

import polars as pl

from account_tax.data.spec import DataSpec

LEDGER_COLUMNS = {
    "id": "entry_id",
    "label": "account",
    "text": ["memo"],
    "categorical": ["vendor"],
    "numeric": ["amount"],
    "date": ["date"],
}


def ledger_config(path: Path, **data_overrides) -> dict:
    """A workflow config for a small ledger CSV with the LEDGER_COLUMNS roles."""
    data = {"path": str(path), "columns": dict(LEDGER_COLUMNS)} | data_overrides
    return {
        "data": data,
        "clean": {"case": "lower", "drop_duplicates": True},
        "features": {"mask_digits": ["memo"]},
        "split": {"seed": 7},
        "serialize": {
            "fields": [
                {"column": "memo"},
                {"column": "vendor"},
                {"column": "amount_magnitude", "name": "amount"},
                {"column": "date_month", "name": "month"},
            ]
        },
    }


def ledger_spec(path: Path, **data_overrides) -> DataSpec:
    return DataSpec.from_config(ledger_config(path, **data_overrides))


def ledger_row(n: int, **overrides) -> dict:
    row = {
        "entry_id": f"E{n:05d}",
        "date": "2024-03-15",
        "vendor": "Acme GmbH",
        "memo": f"Office chairs invoice {n}",
        "amount": "1234.50",
        "account": "4930",
    }
    return row | overrides


def small_ledger(path):
    """60 good rows in 4 classes (one too small to stratify), 2 duplicates, 3 bad rows."""
    accounts = ["4930"] * 30 + ["4210"] * 18 + ["4400"] * 10 + ["1800"] * 2
    memos = {"4930": "office supplies", "4210": "rent", "4400": "sales revenue", "1800": "bank"}
    rows = [
        ledger_row(i, account=a, memo=f"{memos[a]} no {i}", amount=f"{10 + i}.00")
        for i, a in enumerate(accounts)
    ]
    rows += [rows[0], rows[5]]
    rows += [
        ledger_row(100, amount="12,x"),
        ledger_row(101, date="2024-13-40"),
        ledger_row(102, account=""),
    ]
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_csv(path)
    return len(rows)
