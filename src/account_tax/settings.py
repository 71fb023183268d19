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
from dataclasses import asdict, dataclass, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Self, get_type_hints

import jsonschema
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
    message names only the unexpected key), and the schema's `patternInWords` where a value does
    not fit a pattern (jsonschema's message gives the regular expression)."""
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return f"unknown key {', '.join(map(repr, unknown))}; allowed keys: {', '.join(allowed)}"
    if error.validator == "pattern" and "patternInWords" in error.schema:
        return f"{error.instance!r} is not allowed: {error.schema['patternInWords']}"
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
