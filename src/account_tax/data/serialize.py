"""Serialize: each record becomes one text, `name: value | name: value`, plus its label id.

Built from polars expressions over whole columns; fields with no value are left out of the text
rather than written as empty.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from account_tax.data.label_map import LabelMap
from account_tax.data.spec import CHART, LABEL_SOURCE, LEDGER, DataSpec
from account_tax.errors import DataError
from account_tax.io import require_columns, write_parquet
from account_tax.settings import SOURCE_ROW, SectionView

log = logging.getLogger(__name__)

ID = "id"
TEXT = "text"
LABEL_ID = "label_id"


@dataclass(frozen=True)
class SerializeSettings(SectionView):
    SECTION = "serialize"
    # Each a mapping: `column`, and the `name` the text gives it (the column's own if absent).
    fields: tuple[dict[str, str], ...]
    template: str
    separator: str
    float_decimals: int
    class_texts: bool


def value_text(column: str, dtype: pl.DataType, float_decimals: int) -> pl.Expr:
    """A column's values as text; floats rounded, with a trailing `.0` dropped (years, counts)."""
    value = pl.col(column)
    if dtype.is_float():
        return value.round(float_decimals).cast(pl.String).str.replace(r"\.0$", "")
    return value.cast(pl.String)


def check_fields(spec: DataSpec, options: SerializeSettings) -> None:
    """A record's text holds no field that gives its account away: the label, or where it came
    from (`label_source`). Trained on, the model would read the answer off the text, score near
    perfect on validation and test, and meet new records, which have none, unprepared. Checked
    before any job runs (workflow/rules/common.smk) and by `serialize`."""
    given = [f["column"] for f in options.fields if f["column"] in (spec.label, LABEL_SOURCE)]
    if given:
        raise DataError(
            f"config `serialize.fields` names {given[0]!r}, which gives each record's account"
            " away (the label, or where it came from); new records to predict have none"
        )


def text_expression(schema: pl.Schema, options: SerializeSettings) -> pl.Expr:
    template = options.template
    if template.count("{value}") != 1:
        raise ValueError(f"serialize.template must contain {{value}} once: {template!r}")
    parts = []
    for field in options.fields:
        column = field["column"]
        before, after = template.replace("{name}", field.get("name", column)).split("{value}")
        value = value_text(column, schema[column], options.float_decimals)
        parts.append(pl.concat_str(pl.lit(before), value, pl.lit(after)))
    return pl.concat_str(parts, separator=options.separator, ignore_nulls=True)


def class_text_records(label_map: LabelMap) -> pl.DataFrame:
    """One record per account that takes postings and has a name: its text as the head starts
    from it (see `serialize.class_texts`)."""
    labels = label_map.labels
    kept = [i for i in range(len(labels)) if label_map.names[i] and label_map.postable[i]]
    texts = label_map.class_texts()
    return pl.DataFrame(
        {
            ID: [f"class:{labels[i]}" for i in kept],
            TEXT: [texts[i] for i in kept],
            LABEL_ID: pl.Series(kept, dtype=pl.Int32),
            LABEL_SOURCE: [CHART] * len(kept),
        }
    )


def serialize(
    source: Path,
    spec: DataSpec,
    options: SerializeSettings,
    label_map_path: Path,
    output: Path,
    with_class_texts: bool = False,
) -> int:
    """Write `id`, `text`, `label_id` and `label_source` (where the label came from: the ledger,
    or a correction) for every record of `source`, and with `with_class_texts` the accounts'
    texts as records of their own (label_source chart); return the row count."""
    check_fields(spec, options)
    frame = pl.scan_parquet(source)
    schema = frame.collect_schema()
    fields = [field["column"] for field in options.fields]
    try:
        require_columns(schema.names(), fields, source)
    except DataError as error:
        raise DataError(f"{error} (named in serialize.fields)") from None
    label_map = LabelMap.read(label_map_path)
    labels = label_map.labels
    label_ids = {label: index for index, label in enumerate(labels)}
    id_column = spec.id or SOURCE_ROW
    serialized = frame.select(
        pl.col(id_column).cast(pl.String).alias(ID),
        text_expression(schema, options).alias(TEXT),
        pl.col(spec.label)
        .replace_strict(label_ids, default=None, return_dtype=pl.Int32)
        .alias(LABEL_ID),
        (pl.col(LABEL_SOURCE) if LABEL_SOURCE in schema else pl.lit(LEDGER)).alias(LABEL_SOURCE),
    )
    unknown = (
        frame.filter(pl.col(spec.label).is_not_null() & ~pl.col(spec.label).is_in(labels))
        .select(SOURCE_ROW, spec.label)
        .head(5)
        .collect()
    )
    if unknown.height:
        rows = ", ".join(f"row {r} ({label!r})" for r, label in unknown.iter_rows())
        raise DataError(
            f"{source}: label(s) in column '{spec.label}' missing from {label_map_path}: {rows}"
        )
    if with_class_texts:
        serialized = pl.concat([serialized, class_text_records(label_map).lazy()])
    write_parquet(serialized, output)
    rows = pl.scan_parquet(output).select(pl.len()).collect().item()
    log.info("serialize: %d rows -> %s", rows, output)
    return rows


def read_split(path: Path, num_labels: int) -> pl.DataFrame:
    """A serialized split as scoring reads it (id, text, label id); every label id must be one of
    the label map's."""
    frame = pl.read_parquet(path)
    require_columns(frame.columns, (ID, TEXT, LABEL_ID), path)
    frame = frame.select(ID, pl.col(TEXT).fill_null(""), LABEL_ID)
    outside = frame.filter(~pl.col(LABEL_ID).is_between(0, num_labels - 1).fill_null(False))
    if outside.height:
        examples = ", ".join(
            f"{i!r} ({label})" for i, label in outside.select(ID, LABEL_ID).head(5).iter_rows()
        )
        raise DataError(
            f"{path}: {outside.height} row(s) with a label id missing or outside the label map's "
            f"0..{num_labels - 1}, e.g. {examples}"
        )
    return frame
