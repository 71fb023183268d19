"""The `data` section as the stages read it: where the raw table is, which role each column
plays, and the chart of accounts that `data.classes` names, read and checked here (the one
reader of charts)."""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from account_tax.errors import DataError
from account_tax.io import as_utf8, check_encoding, is_utf8, read_spreadsheet_csv
from account_tax.settings import SectionView, complete


@dataclass(frozen=True)
class DataSpec:
    """Where the raw table is and which role each column plays (the `data` section, with the
    column roles at the top and the chart read from `data.classes`)."""

    path: str
    format: str
    label: str
    id: str | None
    text: tuple[str, ...]
    categorical: tuple[str, ...]
    numeric: tuple[str, ...]
    date: tuple[str, ...]
    classes: tuple[str, ...] | None
    # The chart the classes come from (codes again, with names, descriptions and parents).
    chart: Chart | None
    # Names for classes the chart leaves unnamed, from CamelCase labels
    # (see features.make_label_map).
    class_names_from_labels: bool
    csv_separator: str
    encoding: str
    null_values: tuple[str, ...]
    date_format: str
    number_format: str
    # Files of reviewed rows whose accounts replace the ledger's (data/corrections.py).
    corrections: tuple[str, ...]

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> DataSpec:
        data = complete(config["data"], "data")
        columns = data["columns"]
        if data["corrections"] and not columns["id"]:
            raise DataError(
                "config `data.corrections` needs `data.columns.id`: a correction names its record"
            )
        check_roles(columns)
        check_code_page(data["encoding"])
        chart = read_chart(
            data["classes"], ChartColumns.from_complete(data["chart_columns"]), data["encoding"]
        )
        return cls(
            path=data["path"],
            format=data["format"],
            label=columns["label"],
            id=columns["id"],
            text=tuple(columns["text"]),
            categorical=tuple(columns["categorical"]),
            numeric=tuple(columns["numeric"]),
            date=tuple(columns["date"]),
            classes=chart.codes if chart else None,
            chart=chart,
            class_names_from_labels=data["class_names_from_labels"],
            csv_separator=data["csv_separator"],
            encoding=data["encoding"],
            null_values=tuple(data["null_values"]),
            date_format=data["date_format"],
            number_format=data["number_format"],
            corrections=tuple(data["corrections"]),
        )

    @property
    def string_columns(self) -> tuple[str, ...]:
        """Columns holding free or categorical text, normalised the same way."""
        return self.text + self.categorical

    @property
    def feature_columns(self) -> tuple[str, ...]:
        return self.text + self.categorical + self.numeric + self.date

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column the workflow reads, id first and label last."""
        head = (self.id,) if self.id else ()
        return head + self.feature_columns + (self.label,)


def check_roles(columns: Mapping[str, Any]) -> None:
    """A column has one role in `data.columns`: read twice, it would be two columns of one name."""
    roles: dict[str, list[str]] = {}
    for role, named in columns.items():
        for column in [named] if isinstance(named, str) else named or []:
            roles.setdefault(column, []).append(role)
    twice = {column: named for column, named in roles.items() if len(named) > 1}
    if twice:
        column, named = next(iter(twice.items()))
        raise DataError(
            f"config `data.columns`: column {column!r} has more than one role"
            f" ({', '.join(named)}); give each column one"
        )


LABEL_TRIM = " \t\n\r\f\v"
"""What is trimmed from both ends of a label, in the data and in data.classes alike; a label is
otherwise kept as written (inner spaces, leading zeros, case)."""

LABEL_SOURCE = "label_source"
LEDGER, CORRECTION, CHART = "ledger", "correction", "chart"
"""Where a record's label came from: the ledger as read, or a correction (data.corrections)."""

PREDICTED_LABEL, CONFIDENCE, NOVEL = "predicted_label", "confidence", "novel"
"""What a prediction says of its suggestion: the account, its calibrated probability, and whether
the record is unlike any training record (never posted). Predict's review file carries them, so
a reviewed file that comes back as corrections says how each suggestion fared (the track record,
data/corrections.py)."""
RIGHT = "right"
"""The track record's verdict: whether the suggestion was the account people chose."""
REVIEW_SHEET, ACCOUNTS_SHEET = "review", "accounts"
"""The sheets of predict's review workbook: the rows to review, and the accounts they may take
(which holds no corrections)."""

CHART_SUFFIXES = (".csv", ".parquet")
"""data.classes naming a file with one of these extensions is a chart table, any other a list of
codes, one per line."""


@dataclass(frozen=True)
class ChartColumns(SectionView):
    """The columns of a chart of accounts table (`data.chart_columns`); None: not in the file."""

    SECTION = "data.chart_columns"
    code: str
    name: str | None
    description: str | None
    parent: str | None
    postable: str | None


@dataclass(frozen=True)
class Chart:
    """The known classes in label-id order, with what the chart says of each (None: nothing; a
    list of codes says nothing but the codes). Every parent is one of `codes`, without cycles."""

    codes: tuple[str, ...]
    names: tuple[str | None, ...]
    descriptions: tuple[str | None, ...]
    parents: tuple[str | None, ...]
    postable: tuple[bool, ...]
    """Whether the account takes postings: the chart's `postable` column, else the accounts that
    are no other's parent (a group is not posted to), else all."""


def check_code_page(encoding: str) -> None:
    """Refuse a `data.encoding` that Python does not know, or that writes a line's end or the
    separators otherwise than ASCII does: files are read line by line (`io.as_utf8`)."""
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise DataError(
            f"config `data.encoding`: {encoding!r} is not an encoding Python knows"
        ) from None
    if not is_utf8(encoding) and ",;\t\n".encode(encoding) != b",;\t\n":
        raise DataError(
            f"config `data.encoding`: {encoding!r} does not write ASCII as ASCII does; save the "
            "file as CSV UTF-8 instead"
        )


def read_chart(value: list[str] | str | None, columns: ChartColumns, encoding: str) -> Chart | None:
    """The chart of `data.classes`: an inline list of codes, a text file with one per line
    (blank lines skipped), a CSV (as a spreadsheet saves it, in UTF-8 or `encoding`) or Parquet
    table with the `columns`, or None (from the data).

    Codes and parents are trimmed as the data's labels are; names and descriptions of all
    whitespace at the ends, and a blank one is None. Errors name the file (or `data.classes`),
    the 1-based data row, line or item, and the column.
    """
    if value is None:
        return None
    if isinstance(value, list):
        return _checked_chart("data.classes", "item", list(enumerate(value, 1)), None, {})
    path = Path(value)
    if not path.is_file():
        raise DataError(f"data.classes: no chart file {path}")
    if path.suffix.lower() in CHART_SUFFIXES:
        return _read_chart_table(path, columns, encoding)
    check_encoding(path, encoding)
    with as_utf8(path, encoding) as readable:
        lines = readable.read_text(encoding="utf-8-sig").splitlines()
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip(LABEL_TRIM)]
    return _checked_chart(str(path), "line", numbered, None, {})


def _read_chart_table(path: Path, columns: ChartColumns, encoding: str) -> Chart:
    try:
        if path.suffix.lower() == ".csv":
            frame = read_spreadsheet_csv(path, encoding)
        else:
            frame = pl.read_parquet(path)
    except pl.exceptions.PolarsError as error:
        raise DataError(f"{path}: cannot read the chart of accounts: {error}") from error
    wanted = {key: name for key, name in asdict(columns).items() if name is not None}
    for key, name in wanted.items():
        if name not in frame.columns:
            raise DataError(
                f"{path}: no column '{name}' (data.chart_columns.{key}); "
                f"the chart's columns: {frame.columns}"
            )
    values = {key: frame.get_column(name).cast(pl.String).to_list() for key, name in wanted.items()}
    parents = dict(enumerate(values.get("parent", ()), 1))
    chart = _checked_chart(str(path), "row", list(enumerate(values["code"], 1)), columns, parents)
    blank = [None] * frame.height
    if columns.postable is not None:
        postable = tuple(
            _yes_or_no(value, f"{path}: row {row}, column '{columns.postable}'")
            for row, value in enumerate(values["postable"], 1)
        )
        if not any(postable):
            raise DataError(f"{path}: no account takes postings (column '{columns.postable}')")
        chart = replace(chart, postable=postable)
    return replace(
        chart,
        names=tuple(_text(value) for value in values.get("name", blank)),
        descriptions=tuple(_text(value) for value in values.get("description", blank)),
    )


YES, NO = ("true", "yes", "y", "1", "x"), ("false", "no", "n", "0", "")


def _yes_or_no(value: str | None, where: str) -> bool:
    """A chart's postable flag: yes/no, true/false, 1/0, x/empty, in any case."""
    flag = (value or "").strip().lower()
    if flag not in YES + NO:
        raise DataError(f"{where}: {value!r} is not yes or no (true/false, 1/0, x/empty)")
    return flag in YES


def _text(value: str | None) -> str | None:
    return (value or "").strip() or None


def _checked_chart(
    source: str,
    unit: str,
    codes: list[tuple[int, str | None]],
    columns: ChartColumns | None,
    parents: dict[int, str | None],
) -> Chart:
    """Codes (row, code) and parents by row, trimmed and checked: none empty or repeated, every
    parent a code, no cycle. `columns` None: a plain list, which has no column to name."""

    def at(row: int, column: str | None) -> str:
        return f"{source}: {unit} {row}" + (f", column '{column}'" if columns else "")

    if not codes:
        raise DataError(f"{source}: the chart of accounts lists no class")
    code_column = columns.code if columns else None
    parent_column = columns.parent if columns else None
    row_of: dict[str, int] = {}
    for row, raw in codes:
        code = (raw or "").strip(LABEL_TRIM)
        if not code:
            raise DataError(f"{at(row, code_column)}: empty code")
        if code in row_of:
            raise DataError(f"{at(row, code_column)}: code '{code}' repeats {unit} {row_of[code]}")
        row_of[code] = row
    parent_of: dict[str, str | None] = {}
    for code, row in row_of.items():
        parent = (parents.get(row) or "").strip(LABEL_TRIM) or None
        if parent is not None and parent not in row_of:
            raise DataError(
                f"{at(row, parent_column)}: parent '{parent}' is not a code of the chart"
            )
        parent_of[code] = parent
    cycle = _cycle(parent_of)
    if cycle:
        # Named from its member nearest the top of the file.
        first = min(range(len(cycle)), key=lambda i: row_of[cycle[i]])
        cycle = cycle[first:] + cycle[:first]
        raise DataError(
            f"{at(row_of[cycle[0]], parent_column)}: the parent links form a cycle: "
            + " -> ".join([*cycle, cycle[0]])
        )
    groups = set(parent_of.values())
    return Chart(
        tuple(row_of),
        (None,) * len(row_of),
        (None,) * len(row_of),
        tuple(parent_of.values()),
        tuple(code not in groups for code in row_of),
    )


def _cycle(parent_of: dict[str, str | None]) -> list[str]:
    """The codes of one cycle of parent links, each the child of the next; [] when there is none.

    Each code has at most one parent, so following the links from each code in turn either ends
    at a top account or at a code already met: on the walk itself, that is a cycle.
    """
    finished: set[str] = set()
    for start in parent_of:
        walk: list[str] = []
        code: str | None = start
        while code is not None and code not in finished and code not in walk:
            walk.append(code)
            code = parent_of[code]
        if code is not None and code in walk:
            return walk[walk.index(code) :]
        finished.update(walk)
    return []
