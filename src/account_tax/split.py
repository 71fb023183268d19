"""Split: stratified train/validation/test, deterministic by seed.

Within each class the rows are ordered by a seeded random key; the first `n_test` go to test, the
next `n_validation` to validation, the rest to train. A class with at least `min_class_size` rows
gets at least one row in every split with a non-zero fraction; a smaller class goes to train only
and is listed in the report, since it cannot be stratified.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from account_tax.io import write_json, write_parquets
from account_tax.settings import DataSpec

log = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
SPLIT = "split"
SPLIT_DTYPE = pl.Enum(SPLITS)


def share(size: pl.Expr, fraction: float) -> pl.Expr:
    """Rows of a class given to a held-out split: its rounded share, at least one when non-zero."""
    if fraction == 0:
        return pl.lit(0, dtype=pl.Int64)
    return (size * fraction).round().cast(pl.Int64).clip(lower_bound=1)


def assign_splits(labels: pl.Series, options: dict[str, Any]) -> pl.Series:
    """The split of each row (a `SPLIT_DTYPE`), in row order, from the labels alone."""
    seed = options.get("seed", 13)
    min_class_size = options.get("min_class_size", 3)
    validation_fraction = options.get("validation_fraction", 0.1)
    test_fraction = options.get("test_fraction", 0.1)
    held_out = sum(1 for f in (validation_fraction, test_fraction) if f > 0)
    if min_class_size <= held_out:
        raise ValueError(
            f"split.min_class_size must exceed the number of held-out splits ({held_out}) "
            f"so that every stratified class keeps a training row"
        )
    key = np.random.default_rng(seed).random(len(labels))
    # Each window and share is computed once, as a column, not once per use in the conditions.
    frame = pl.DataFrame({"label": labels, "key": key}).select(
        pl.len().over("label").alias("size"),
        (pl.col("key").rank("ordinal").over("label") - 1).alias("rank"),
    )
    size = pl.col("size")
    # Held-out shares never take a stratified class's last training row.
    frame = frame.with_columns(
        pl.min_horizontal(share(size, test_fraction), size - 1).alias("n_test")
    )
    frame = frame.with_columns(
        pl.min_horizontal(share(size, validation_fraction), size - 1 - pl.col("n_test")).alias(
            "n_validation"
        )
    )
    rank, n_test, n_validation = pl.col("rank"), pl.col("n_test"), pl.col("n_validation")
    assignment = frame.select(
        pl.when(size < min_class_size)
        .then(pl.lit("train", SPLIT_DTYPE))
        .when(rank < n_test)
        .then(pl.lit("test", SPLIT_DTYPE))
        .when(rank < n_test + n_validation)
        .then(pl.lit("validation", SPLIT_DTYPE))
        .otherwise(pl.lit("train", SPLIT_DTYPE))
        .alias(SPLIT)
    )
    return assignment.get_column(SPLIT)


def rows_sha256(path: Path) -> str:
    """sha256 of a Parquet file's content: column names and types, then each row's hash in order.

    The file's bytes depend on how many threads wrote it (its row groups); its rows do not, so two
    machines with different core counts report the same hash for the same split. The row hashes
    are polars' (pinned in pyproject.toml), with a fixed seed.
    """
    frame = pl.scan_parquet(path)
    digest = hashlib.sha256(repr(list(frame.collect_schema().items())).encode())
    hashes = frame.select(pl.struct(pl.all()).hash(seed=0)).collect(engine="streaming")
    digest.update(hashes.to_series().to_numpy().astype("<u8").tobytes())
    return digest.hexdigest()


def split(source: Path, spec: DataSpec, options: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Write `<split>.parquet` for each split and `split_report.json`; return the report."""
    records = pl.scan_parquet(source)
    labels = records.select(spec.label).collect(engine="streaming").get_column(spec.label)
    assignment = pl.DataFrame([labels, assign_splits(labels, options)])
    # Only the labels and the assignment are held; every other column streams to its file.
    records = pl.concat([records, assignment.select(SPLIT).lazy()], how="horizontal")
    splits = assignment.get_column(SPLIT)
    report: dict[str, Any] = {"seed": options.get("seed", 13), "rows": labels.len(), "splits": {}}
    paths = {name: out_dir / f"{name}.parquet" for name in SPLITS}
    write_parquets(
        {paths[name]: records.filter(pl.col(SPLIT) == name).drop(SPLIT) for name in SPLITS}
    )
    for name, path in paths.items():
        report["splits"][name] = {"rows": int((splits == name).sum()), "sha256": rows_sha256(path)}

    per_class = (
        assignment.group_by(spec.label, SPLIT)
        .len()
        .pivot(on=SPLIT, index=spec.label, values="len")
        .fill_null(0)
        .sort(spec.label)
    )
    for name in SPLITS:
        if name not in per_class.columns:
            per_class = per_class.with_columns(pl.lit(0, dtype=pl.UInt32).alias(name))
    report["per_class"] = {
        row[spec.label]: {name: int(row[name]) for name in SPLITS}
        for row in per_class.iter_rows(named=True)
    }
    min_class_size = options.get("min_class_size", 3)
    report["train_only_classes"] = sorted(
        label for label, n in labels.value_counts().iter_rows() if n < min_class_size
    )
    assert sum(s["rows"] for s in report["splits"].values()) == labels.len()
    write_json(out_dir / "split_report.json", report)
    log.info(
        "split: %s; %d classes too small to stratify went to train",
        {name: report["splits"][name]["rows"] for name in SPLITS},
        len(report["train_only_classes"]),
    )
    return report


def counts_table(report: dict[str, Any]) -> str:
    """Rows per class in each split, largest class first, as a TSV table for the report."""
    rows = sorted(report["per_class"].items(), key=lambda item: -sum(item[1].values()))
    lines = ["class\t" + "\t".join(SPLITS) + "\ttotal"]
    lines += [
        f"{label}\t" + "\t".join(str(n[s]) for s in SPLITS) + f"\t{sum(n.values())}"
        for label, n in rows
    ]
    return "\n".join(lines) + "\n"
