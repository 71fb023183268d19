"""Excel workbooks (.xlsx) that people reviewed, read back as text as a CSV file would hold it.
A module of its own, so that only the jobs that read a workbook load openpyxl."""

from __future__ import annotations

from datetime import datetime, time
from pathlib import Path
from typing import Any

import openpyxl
import polars as pl

from account_tax.io import refuse_duplicates


def read_workbook(path: Path, decimal_separator: str) -> list[tuple[str, pl.DataFrame]]:
    """Each worksheet of an Excel workbook (.xlsx) with a header, by title, every column as text
    as a CSV file would hold it: a number cell in its digits with `decimal_separator` (a whole
    number, as openpyxl reads it, without a decimal part: an id or account a spreadsheet took
    for a number reads as its digits); a date cell in ISO form, with its time of day where it
    has one; a true/false cell as `true` or `false`; a formula as the value it last had. Columns
    with no name, and the rows with no value after the last row with one, are left out; a row
    with no value before it stays, a row of nothing as in the CSV file of the sheet, so that
    every row keeps its number."""
    workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        sheets = []
        for sheet in workbook.worksheets:
            rows = sheet.iter_rows(values_only=True)
            header = [_cell_text(value, decimal_separator) for value in next(rows, ())]
            named = [index for index, name in enumerate(header) if name]
            if not named:
                continue
            names = [header[index] for index in named]
            refuse_duplicates(names, f"{path} [{sheet.title}]")
            records: list[tuple[Any, ...]] = []
            blank = 0
            for row in rows:
                if any(value is not None for value in row):
                    records += [()] * blank + [row]
                    blank = 0
                else:
                    blank += 1
            columns = {
                name: [
                    _cell_text(row[index] if index < len(row) else None, decimal_separator)
                    for row in records
                ]
                for index, name in zip(named, names, strict=True)
            }
            sheets.append(
                (sheet.title, pl.DataFrame(columns, schema=dict.fromkeys(names, pl.String)))
            )
        return sheets
    finally:
        workbook.close()


def _cell_text(value: Any, decimal_separator: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == time() else value.isoformat(" ")
    if isinstance(value, float):
        return str(value).replace(".", decimal_separator)
    return str(value)
