"""Typed views of the validated workflow config, shared by every stage.

The workflow validates the whole config against `workflow/schemas/config.schema.yaml` before any
job runs and hands each script the sections it needs as JSON. A script run on its own may be given
the config file instead; the same views read both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

SOURCE_ROW = "source_row"
"""Column added at ingest: the 1-based data row of the record in its source file."""


def load_settings(value: str) -> dict[str, Any]:
    """Parse `--settings`: a JSON object, or the path of a YAML/JSON config file."""
    text = value.strip()
    if text.startswith("{"):
        return json.loads(text)
    with Path(value).open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@dataclass(frozen=True)
class DataSpec:
    """Where the raw table is and which role each column plays."""

    path: str
    format: str
    label: str
    id: str | None
    text: tuple[str, ...]
    categorical: tuple[str, ...]
    numeric: tuple[str, ...]
    date: tuple[str, ...]
    classes: tuple[str, ...] | None
    csv_separator: str = ","
    null_values: tuple[str, ...] = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None")
    date_format: str = "%Y-%m-%d"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> DataSpec:
        data = config["data"]
        columns = data["columns"]
        return cls(
            path=data["path"],
            format=data.get("format", "auto"),
            label=columns["label"],
            id=columns.get("id"),
            text=tuple(columns.get("text", ())),
            categorical=tuple(columns.get("categorical", ())),
            numeric=tuple(columns.get("numeric", ())),
            date=tuple(columns.get("date", ())),
            classes=read_classes(data.get("classes")),
            csv_separator=data.get("csv_separator", ","),
            null_values=tuple(data.get("null_values", cls.null_values)),
            date_format=data.get("date_format", "%Y-%m-%d"),
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


def read_classes(value: list[str] | str | None) -> tuple[str, ...] | None:
    """The known classes: inline, from a file with one class per line, or None (from the data).

    Each is trimmed as the data's labels are; blank lines of a file are skipped.
    """
    if value is None:
        return None
    if isinstance(value, str):
        lines = Path(value).read_text(encoding="utf-8").splitlines()
        value = [line for line in lines if line.strip(LABEL_TRIM)]
    value = [name.strip(LABEL_TRIM) for name in value]
    if len(set(value)) != len(value):
        duplicated = sorted({c for c in value if value.count(c) > 1})
        raise ValueError(f"data.classes lists these classes more than once: {duplicated}")
    return tuple(value)


def known_keys(cls: type, values: dict[str, Any], where: str) -> dict[str, Any]:
    """A copy of a config section for dataclass `cls`; a key it does not know is an error (a
    script run on a config file has no schema check, and a typo must not become a default)."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown key(s) in {where}: {unknown}; known: {sorted(names)}")
    return dict(values)
