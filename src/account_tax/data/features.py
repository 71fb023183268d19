"""Features: derived fields for the text the model reads, and the label map.

The label map gives every class a stable id: the order of `data.classes` when the config lists
them (so classes without samples get ids too), else the sorted labels seen in the data. Beside
`labels` and `counts` it lists, in label-id order, each class's name, description and parent code
(null where unknown) from the chart of accounts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from account_tax.data.ingest import camel_to_words
from account_tax.data.spec import DataSpec
from account_tax.errors import DataError
from account_tax.io import write_json, write_parquet
from account_tax.settings import SectionView

log = logging.getLogger(__name__)

DATE_PARTS = {
    "year": lambda c: c.dt.year(),
    "month": lambda c: c.dt.month(),
    "day": lambda c: c.dt.day(),
    "weekday": lambda c: c.dt.weekday(),
    "quarter": lambda c: c.dt.quarter(),
}


def signed_log10(column: pl.Expr) -> pl.Expr:
    """sign(x)·log10(1+|x|): amounts span many orders of magnitude and can be negative."""
    return (column.sign() * (column.abs() + 1).log10()).round(3)


def signed_magnitude(column: pl.Expr) -> pl.Expr:
    """The signed order of magnitude as a token (`+1e3`, `-1e0`, `0`), a coarse amount bin."""
    size = column.abs()
    estimate = size.log10().floor()
    # log10 is off by one ulp at some powers of ten (log10(1000) = 2.9999999999999996 in
    # polars): the exact powers 10**k and 10**(k+1) around the estimate decide.
    exponent = (
        pl.when(pl.lit(10.0).pow(estimate + 1) <= size)
        .then(estimate + 1)
        .when(pl.lit(10.0).pow(estimate) > size)
        .then(estimate - 1)
        .otherwise(estimate)
    )
    exponent = exponent.clip(lower_bound=0).cast(pl.Int64).cast(pl.String)
    sign = pl.when(column < 0).then(pl.lit("-")).otherwise(pl.lit("+"))
    return (
        pl.when(column.is_null())
        .then(None)
        .when(column == 0)
        .then(pl.lit("0"))
        .otherwise(pl.concat_str(sign, pl.lit("1e"), exponent))
    )


@dataclass(frozen=True)
class FeatureSettings(SectionView):
    SECTION = "features"
    date_parts: tuple[str, ...]
    numeric_log: bool
    numeric_magnitude: bool
    mask_digits: tuple[str, ...]


def derived_columns(spec: DataSpec, options: FeatureSettings) -> list[pl.Expr]:
    derived: list[pl.Expr] = []
    for column in spec.date:
        for part in options.date_parts:
            derived.append(DATE_PARTS[part](pl.col(column)).alias(f"{column}_{part}"))
    for column in spec.numeric:
        if options.numeric_log:
            derived.append(signed_log10(pl.col(column)).alias(f"{column}_log"))
        if options.numeric_magnitude:
            derived.append(signed_magnitude(pl.col(column)).alias(f"{column}_magnitude"))
    for column in options.mask_digits:
        if column not in spec.text:
            raise DataError(f"features.mask_digits names '{column}', which is not a text column")
        derived.append(pl.col(column).str.replace_all(r"\d+", "#"))
    return derived


def label_map(counts: dict[str, int], spec: DataSpec) -> dict[str, Any]:
    """Ids for every class; counts include classes with no samples (0). Per class, in label-id
    order, its name, description and parent from the chart, null where unknown; a class the
    chart leaves unnamed is named from its label with `data.class_names_from_labels`."""
    labels = list(spec.classes) if spec.classes is not None else sorted(counts)
    unknown = sorted(set(counts) - set(labels))
    if unknown:
        # clean rejects unknown classes, so this is a wiring error, not bad data.
        raise DataError(f"labels not in data.classes reached features: {unknown[:10]}")
    unknowns = [None] * len(labels)
    chart = spec.chart
    names = list(chart.names) if chart else unknowns
    if spec.class_names_from_labels:
        # Split as ingest splits the concept names the default data's labels were taken from.
        words = pl.Series(labels, dtype=pl.String).str.replace_all("_", " ")
        derived = pl.select(camel_to_words(pl.lit(words))).to_series().to_list()
        names = [name or word for name, word in zip(names, derived, strict=True)]
    return {
        "label_column": spec.label,
        "labels": labels,
        "counts": {label: counts.get(label, 0) for label in labels},
        "names": names,
        "descriptions": list(chart.descriptions) if chart else unknowns,
        "parents": list(chart.parents) if chart else unknowns,
    }


def build_features(
    source: Path, spec: DataSpec, options: FeatureSettings, output: Path, label_map_path: Path
) -> dict[str, Any]:
    """Add derived fields to the clean records and write the label map; return the label map."""
    frame = pl.scan_parquet(source)
    write_parquet(frame.with_columns(derived_columns(spec, options)), output)
    counts = dict(pl.scan_parquet(output).group_by(spec.label).len().collect().iter_rows())
    counts.pop(None, None)
    mapping = label_map(counts, spec)
    write_json(label_map_path, mapping)
    present = sum(1 for c in mapping["counts"].values() if c > 0)
    log.info(
        "features: %d classes (%d with samples, %d without) -> %s",
        len(mapping["labels"]),
        present,
        len(mapping["labels"]) - present,
        label_map_path,
    )
    return mapping
