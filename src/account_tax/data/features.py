"""Features: derived fields for the text the model reads, and the label map.

The label map gives every class a stable id: the order of `data.classes` when the config lists
them (so classes without samples get ids too), else the sorted labels seen in the data. Beside
`labels` and `counts` it lists, in label-id order, each class's name, description and parent code
(null where unknown) from the chart of accounts.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
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


LABEL_MAP = "label_map.json"
"""The label map's file name, beside the features and in every exported model's folder."""


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


def label_map(
    counts: dict[str, int], spec: DataSpec, previous: dict[str, Any] | None = None
) -> dict[str, Any]:
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
        # A label map from before `postable` existed has every account take postings.
        for key in ("names", "descriptions", "parents", "postable"):
            for label, value in zip(previous["labels"], previous.get(key) or [], strict=False):
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
        kept = set(previous["labels"])
        labels = [*previous["labels"], *(label for label in current if label not in kept)]
    names = [said.get(label, {}).get("names") for label in labels]
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
        "descriptions": [said.get(label, {}).get("descriptions") for label in labels],
        "parents": [said.get(label, {}).get("parents") for label in labels],
        "postable": [said.get(label, {}).get("postable", True) for label in labels],
    }


def build_features(
    source: Path,
    spec: DataSpec,
    options: FeatureSettings,
    output: Path,
    label_map_path: Path,
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Add derived fields to the clean records and write the label map (keeping the ids of
    `previous`, see `label_map`); return the label map."""
    frame = pl.scan_parquet(source)
    write_parquet(frame.with_columns(derived_columns(spec, options)), output)
    counts = dict(pl.scan_parquet(output).group_by(spec.label).len().collect().iter_rows())
    counts.pop(None, None)
    mapping = label_map(counts, spec, previous)
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


def class_texts(label_map: dict[str, Any]) -> list[str]:
    """`name: description`, the name alone, or, for a class the chart leaves unnamed, its code."""
    codes = label_map["labels"]
    names = label_map.get("names") or [None] * len(codes)
    descriptions = label_map.get("descriptions") or [None] * len(codes)
    return [
        ": ".join(part for part in (name or code, description) if part)
        for code, name, description in zip(codes, names, descriptions, strict=True)
    ]


def postable_mask(label_map_path: Path) -> np.ndarray:
    """Per label id, whether the account takes postings (label maps from before this was
    recorded: all do)."""
    mapping = json.loads(label_map_path.read_text(encoding="utf-8"))
    return np.array(mapping.get("postable") or [True] * len(mapping["labels"]), dtype=bool)
