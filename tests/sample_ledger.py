"""A small hand-made ledger for unit tests: rows, column roles and a matching config."""

from pathlib import Path

from account_tax.settings import DataSpec

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
