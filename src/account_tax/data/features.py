"""Features: derived fields for the text the model reads, and the label map.

The label map (`data/label_map.py`) gives every class a stable id: the order of `data.classes`
when the config lists them (so classes without samples get ids too), else the sorted labels seen
in the data.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from account_tax.data.ingest import camel_to_words
from account_tax.data.label_map import LabelMap
from account_tax.data.spec import DataSpec
from account_tax.errors import DataError
from account_tax.io import write_parquet
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


def make_label_map(
    counts: dict[str, int], spec: DataSpec, previous: LabelMap | None = None
) -> LabelMap:
    """Ids for every class; counts include classes with no samples (0). Per class, in label-id
    order, its name, description and parent from the chart, null where unknown, and whether it
    takes postings (see `Chart.postable`; true without a chart); a class the chart leaves
    unnamed is named from its label with `data.class_names_from_labels`.

    `previous`: the label map of the model a warm start begins from. Its classes keep their ids
    (a class the chart no longer lists stays, with what that map said of it and no rows) and the
    others follow, in chart order.
    """
    current = list(spec.classes) if spec.classes is not None else sorted(counts)
    unknown = sorted(set(counts) - set(current))
    if unknown:
        # clean rejects unknown classes, so this is a wiring error, not bad data.
        raise DataError(f"labels not in data.classes reached features: {unknown[:10]}")
    said: dict[str, dict[str, Any]] = {}
    if previous is not None:
        for key in ("names", "descriptions", "parents", "postable"):
            for label, value in zip(previous.labels, getattr(previous, key), strict=True):
                said.setdefault(label, {})[key] = value
    chart = spec.chart
    if chart:
        for i, code in enumerate(chart.codes):
            said[code] = {
                "names": chart.names[i],
                "descriptions": chart.descriptions[i],
                "parents": chart.parents[i],
                "postable": chart.postable[i],
            }
    labels = current
    if previous is not None:
        kept = set(previous.labels)
        labels = [*previous.labels, *(label for label in current if label not in kept)]
    names = [said.get(label, {}).get("names") for label in labels]
    if spec.class_names_from_labels:
        # Split as ingest splits the concept names the default data's labels were taken from.
        words = pl.Series(labels, dtype=pl.String).str.replace_all("_", " ")
        derived = pl.select(camel_to_words(pl.lit(words))).to_series().to_list()
        names = [name or word for name, word in zip(names, derived, strict=True)]
    return LabelMap(
        label_column=spec.label,
        labels=labels,
        counts={label: counts.get(label, 0) for label in labels},
        names=names,
        descriptions=[said.get(label, {}).get("descriptions") for label in labels],
        parents=[said.get(label, {}).get("parents") for label in labels],
        postable=[said.get(label, {}).get("postable", True) for label in labels],
    )


def build_features(
    source: Path,
    spec: DataSpec,
    options: FeatureSettings,
    output: Path,
    label_map_path: Path,
    previous: LabelMap | None = None,
) -> LabelMap:
    """Add derived fields to the clean records and write the label map (keeping the ids of
    `previous`, see `make_label_map`); return the label map."""
    frame = pl.scan_parquet(source)
    write_parquet(frame.with_columns(derived_columns(spec, options)), output)
    counts = dict(pl.scan_parquet(output).group_by(spec.label).len().collect().iter_rows())
    counts.pop(None, None)
    mapping = make_label_map(counts, spec, previous)
    mapping.write(label_map_path)
    present = len(mapping.with_samples())
    log.info(
        "features: %d classes (%d with samples, %d without) -> %s",
        len(mapping.labels),
        present,
        len(mapping.labels) - present,
        label_map_path,
    )
    return mapping
