"""The workflow config: its schema, the one place every default lives, and typed views of its
sections, shared by every stage.

The workflow validates the whole config against `config.schema.yaml` (beside this file) before
any job runs, filling in the schema's defaults, and hands each script the sections it needs as
JSON. A script run on its own may be given the config file instead; `load_settings` checks and
completes both the same way. Each section is read through a frozen dataclass whose fields are
the section's keys (`SectionView`), built from the completed values: no default is written twice.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Self, get_type_hints

import jsonschema
import polars as pl
import yaml

from account_tax.errors import DataError

SOURCE_ROW = "source_row"
"""Column added at ingest: the 1-based data row of the record in its source file."""

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")
"""The config's JSON schema: every key, its type, its default and what it means."""


@cache
def config_schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))


def section_schema(section: str) -> dict[str, Any]:
    """The schema of a dotted section (`train.lora`); "" is the whole config."""
    node = config_schema()
    for name in filter(None, section.split(".")):
        node = node["properties"][name]
    return node


def _fill_defaults(validator, properties, instance, schema):
    # jsonschema's documented way to fill defaults while validating; a copy, so that a filled
    # mapping never shares the schema's own default object.
    if isinstance(instance, dict):
        for name, subschema in properties.items():
            if "default" in subschema:
                instance.setdefault(name, copy.deepcopy(subschema["default"]))
    yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](
        validator, properties, instance, schema
    )


_FillingValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"properties": _fill_defaults}
)


def complete(
    values: Mapping[str, Any], section: str = "", *, whole: bool = False
) -> dict[str, Any]:
    """A copy of `values` checked against the schema of `section` and completed with its
    defaults. For the whole config (""), only the sections given are checked unless `whole`
    (the workflow's own config): a script is handed the sections it reads. A wrong key, type or
    value is a DataError of one line naming the key, the problem and what is allowed."""
    schema = section_schema(section)
    if not section and not whole:
        schema = {key: value for key, value in schema.items() if key != "required"}
    completed = copy.deepcopy(dict(values))
    error = jsonschema.exceptions.best_match(_FillingValidator(schema).iter_errors(completed))
    if error is not None:
        where = ".".join([*filter(None, section.split(".")), *map(str, error.absolute_path)])
        raise DataError(f"config `{where or 'top level'}`: {config_problem(error)}")
    return completed


def config_problem(error: jsonschema.exceptions.ValidationError) -> str:
    """The problem in words, with the allowed keys where an unknown one was given (jsonschema's
    message names only the unexpected key)."""
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return f"unknown key {', '.join(map(repr, unknown))}; allowed keys: {', '.join(allowed)}"
    return error.message


def plain(value: Any) -> Any:
    """A view (or any value holding views and tuples) as JSON-ready dicts and lists."""
    if is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


class SectionView:
    """Base of a frozen dataclass whose fields are the keys of the config section `SECTION`
    (dotted). `of` is the one way to build one: values are checked and completed by the schema,
    lists become tuples and nested sections their own views."""

    SECTION: ClassVar[str]

    @classmethod
    def of(cls, values: Mapping[str, Any] | None = None, /, **overrides: Any) -> Self:
        return cls.from_complete(complete(plain({**(values or {}), **overrides}), cls.SECTION))

    @classmethod
    def from_complete(cls, completed: Mapping[str, Any]) -> Self:
        """The view of values that `complete` has checked and completed for this section (a
        nested section is checked with its parent, not again)."""
        hints = get_type_hints(cls)
        built = {}
        for field in fields(cls):
            value, hint = completed[field.name], hints[field.name]
            if isinstance(hint, type) and issubclass(hint, SectionView):
                value = hint.from_complete(value)
            elif isinstance(value, list):
                value = tuple(value)
            built[field.name] = value
        return cls(**built)

    def to_dict(self) -> dict[str, Any]:
        return plain(self)


@dataclass(frozen=True)
class EvaluateSettings(SectionView):
    """The `evaluate` section; split reads `holdout_classes` too, so it lives here."""

    SECTION = "evaluate"
    bootstrap_resamples: int
    seed: int
    amount_column: str | None
    # A number of classes drawn at random, or the codes themselves.
    holdout_classes: int | tuple[str, ...]


def load_settings(value: str) -> dict[str, Any]:
    """Parse `--settings` (a JSON object, or the path of a YAML/JSON config file), checked and
    completed with the schema's defaults."""
    text = value.strip()
    if text.startswith("{"):
        return complete(json.loads(text))
    with Path(value).open(encoding="utf-8") as handle:
        return complete(yaml.safe_load(handle))


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
    # Names for classes the chart leaves unnamed, from CamelCase labels (see features.label_map).
    class_names_from_labels: bool
    csv_separator: str
    null_values: tuple[str, ...]
    date_format: str

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> DataSpec:
        data = complete(config["data"], "data")
        columns = data["columns"]
        chart = read_chart(data["classes"], ChartColumns.from_complete(data["chart_columns"]))
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
            null_values=tuple(data["null_values"]),
            date_format=data["date_format"],
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


LABEL_TRIM = " \t\n\r\f\v"
"""What is trimmed from both ends of a label, in the data and in data.classes alike; a label is
otherwise kept as written (inner spaces, leading zeros, case)."""

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


@dataclass(frozen=True)
class Chart:
    """The known classes in label-id order, with what the chart says of each (None: nothing; a
    list of codes says nothing but the codes). Every parent is one of `codes`, without cycles."""

    codes: tuple[str, ...]
    names: tuple[str | None, ...]
    descriptions: tuple[str | None, ...]
    parents: tuple[str | None, ...]


def read_chart(value: list[str] | str | None, columns: ChartColumns) -> Chart | None:
    """The chart of `data.classes`: an inline list of codes, a text file with one per line
    (blank lines skipped), a CSV or Parquet table with the `columns`, or None (from the data).

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
        return _read_chart_table(path, columns)
    lines = path.read_text(encoding="utf-8").splitlines()
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip(LABEL_TRIM)]
    return _checked_chart(str(path), "line", numbered, None, {})


def _read_chart_table(path: Path, columns: ChartColumns) -> Chart:
    try:
        if path.suffix.lower() == ".csv":
            frame = pl.read_csv(path, infer_schema=False)
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
    return replace(
        chart,
        names=tuple(_text(value) for value in values.get("name", blank)),
        descriptions=tuple(_text(value) for value in values.get("description", blank)),
    )


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
    return Chart(
        tuple(row_of),
        (None,) * len(row_of),
        (None,) * len(row_of),
        tuple(parent_of.values()),
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
