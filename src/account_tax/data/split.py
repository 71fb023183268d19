"""Split: train/validation/test by one of three strategies, deterministic by seed.

`stratified`: within each class the rows are ordered by a key drawn from each record's id and the
seed; the first `n_test` go to test, the next `n_validation` to validation, the rest to train. A
record keeps its key as the ledger grows, so it mostly keeps its side of the split. A class with
at least `min_class_size` rows gets at least one row in every split with a non-zero fraction; a
smaller class goes to train only and is listed in the report, since it cannot be stratified.

`time`: by `date_column`, validation and test are the latest dates, next month's ledger in
miniature. Rows of one date stay together; each boundary is the date boundary whose held-out
share is nearest its fraction. Rows without a date go to train and are counted in the report.

`group`: by `group_column` (a vendor, say), no group in two splits. Groups of two or more rows
are placed first, larger ones tending to come first in a seeded order, each in the split where
the per-class and total counts come closest to the fractions. Single rows and rows without a group
value then fill, class by class, what each split still lacks, as in `stratified`.

Whatever the strategy, the classes of `evaluate.holdout_classes` go wholly to test, to measure the
model on accounts it never saw. A warm start's split keeps in train every record the model it
starts from has learned (its `trained_rows.parquet`): validation and test are then drawn from the
others, so that neither the shipping decision nor the auto-post threshold nor the test scores rest
on records the model has already been trained on.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from account_tax.data.spec import DataSpec
from account_tax.errors import DataError
from account_tax.io import write_json, write_parquets
from account_tax.settings import SOURCE_ROW, SectionView

log = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
SPLIT = "split"
SPLIT_DTYPE = pl.Enum(SPLITS)
# The split of a code (an index into SPLITS), gathered into a column.
SPLIT_OF_CODE = pl.Series(SPLIT, SPLITS, dtype=SPLIT_DTYPE)
TRAIN, VALIDATION, TEST = range(len(SPLITS))
TRAINED_ROWS = "trained_rows.parquet"
"""In an exported model's folder: the id and label of every row the model has learned (its own
training rows and those of the models it was warm-started from)."""


@dataclass(frozen=True)
class SplitSettings(SectionView):
    SECTION = "split"
    strategy: str
    date_column: str | None
    group_column: str | None
    seed: int
    validation_fraction: float
    test_fraction: float
    min_class_size: int


def share(size: pl.Expr, fraction: float) -> pl.Expr:
    """Rows of a class given to a held-out split: its rounded share, at least one when non-zero."""
    if fraction == 0:
        return pl.lit(0, dtype=pl.Int64)
    return (size * fraction).round().cast(pl.Int64).clip(lower_bound=1)


def fractions(options: SplitSettings) -> np.ndarray:
    """The target share of each split, in SPLITS order."""
    validation = options.validation_fraction
    test = options.test_fraction
    return np.array([1 - validation - test, validation, test])


def check_min_class_size(options: SplitSettings) -> None:
    held_out = sum(1 for f in fractions(options)[1:] if f > 0)
    if options.min_class_size <= held_out:
        raise DataError(
            f"split.min_class_size must exceed the number of held-out splits ({held_out}) "
            f"so that every stratified class keeps a training row"
        )


def check_settings(spec: DataSpec, options: SplitSettings) -> None:
    """What the config alone decides of the split settings: checked before any job runs
    (workflow/rules/common.smk) and by `split`."""
    if options.strategy != "time":
        check_min_class_size(options)
    if options.strategy == "time" and options.date_column not in spec.date:
        raise DataError(
            f"split.strategy 'time' needs split.date_column to name one of the data's date "
            f"columns (data.columns.date: {list(spec.date)}), not {options.date_column!r}"
        )
    if options.strategy == "group":
        if options.group_column is None:
            raise DataError(
                "split.strategy 'group' needs split.group_column to name a column of the records"
            )
        if options.group_column == spec.label:
            raise DataError(
                "split.group_column cannot be the label column: no class could be in two splits"
            )


HOLDOUT_MIN_ROWS = 3
"""A held-out class needs a few test rows for its recall to mean anything."""


def holdout_classes(
    labels: pl.Series,
    holdout: int | tuple[str, ...],
    seed: int,
    source: Path,
    learned: frozenset[str] = frozenset(),
) -> list[str]:
    """The classes to keep out of train and validation: the codes given, or `holdout` classes
    with at least HOLDOUT_MIN_ROWS rows drawn with `seed`, sorted. None of the `learned` classes
    (a warm start's model has learned rows of them), whose rows in test it would have seen."""
    counts = dict(labels.value_counts().iter_rows())
    if not isinstance(holdout, int):
        missing = sorted(set(holdout) - set(counts))
        if missing:
            raise DataError(
                f"evaluate.holdout_classes names {missing}, which have no rows in {source}"
            )
        if learned & set(holdout):
            raise DataError(
                f"evaluate.holdout_classes names {sorted(learned & set(holdout))}, which the"
                " model that train.init_from names has learned rows of: held out, its test rows"
                " would be records it has seen"
            )
        return sorted(holdout)
    eligible = sorted(
        label for label, n in counts.items() if n >= HOLDOUT_MIN_ROWS and label not in learned
    )
    if holdout > len(eligible):
        raise DataError(
            f"evaluate.holdout_classes is {holdout}, but only {len(eligible)} classes in {source} "
            f"have at least {HOLDOUT_MIN_ROWS} rows"
            + (" and no row the model of train.init_from has learned" if learned else "")
        )
    chosen = np.random.default_rng(seed).choice(len(eligible), size=holdout, replace=False)
    return sorted(eligible[index] for index in chosen)


def record_keys(ids: pl.Series, seed: int) -> np.ndarray:
    """A number in [0, 1) per record from its id and the seed alone: a record keeps its key, and
    so its place in its class's order, when the ledger grows or its rows move."""
    hashes = ids.cast(pl.String).hash(seed=seed).to_numpy()
    return (hashes >> np.uint64(11)).astype(np.float64) * 2.0**-53


def assign_splits(
    labels: pl.Series,
    options: SplitSettings,
    ids: pl.Series | None = None,
    learned: np.ndarray | None = None,
) -> pl.Series:
    """The split of each row (a `SPLIT_DTYPE`), in row order. Each class's rows are ordered by
    their `ids`' keys (`record_keys`), or without ids by a seeded random draw per position. Rows
    that `learned` marks (a warm start's) come last in their class, so that its held-out shares
    are drawn from the others first."""
    seed = options.seed
    min_class_size = options.min_class_size
    validation_fraction = options.validation_fraction
    test_fraction = options.test_fraction
    check_min_class_size(options)
    key = np.random.default_rng(seed).random(len(labels)) if ids is None else record_keys(ids, seed)
    if learned is not None:
        key += learned
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


def assign_time_splits(dates: pl.Series, options: SplitSettings) -> pl.Series:
    """The split of each row by its date: test the latest dates, validation the ones before.

    Each boundary lies between two dates, at the one whose held-out row count is nearest its
    fraction of all rows; a split with a non-zero fraction gets at least its latest date, and
    train keeps at least the earliest. Rows without a date go to train.
    """
    shares = fractions(options)
    per_date = dates.drop_nulls().value_counts(name="rows").sort(dates.name)
    days = per_date.height
    needed = 1 + int(np.count_nonzero(shares[1:]))
    if days < needed:
        raise DataError(
            f"split.strategy 'time' needs at least {needed} distinct dates in column "
            f"'{dates.name}' (one per split with a non-zero fraction); it has {days}"
        )
    # before[b]: rows on the first b dates; a boundary b puts dates b and later after it.
    before = np.concatenate([[0], np.cumsum(per_date.get_column("rows").to_numpy())])

    def boundary(end: int, fraction: float, first: int) -> int:
        """The boundary in [first, end) whose rows up to `end` come nearest `fraction`."""
        if fraction == 0:
            return end
        candidates = np.arange(first, end)
        return int(
            candidates[np.argmin(np.abs(before[end] - before[candidates] - fraction * len(dates)))]
        )

    test_start = boundary(days, shares[TEST], first=1 + int(shares[VALIDATION] > 0))
    validation_start = boundary(test_start, shares[VALIDATION], first=1)
    day = per_date.get_column(dates.name)
    date = pl.col(dates.name)
    assignment = pl.lit("train", SPLIT_DTYPE)
    # Comparisons with a missing date are null, which `when` takes as false: such rows stay in
    # train. The later boundary goes outermost, so it wins.
    if validation_start < days:
        assignment = (
            pl.when(date >= day[validation_start])
            .then(pl.lit("validation", SPLIT_DTYPE))
            .otherwise(assignment)
        )
    if test_start < days:
        assignment = (
            pl.when(date >= day[test_start]).then(pl.lit("test", SPLIT_DTYPE)).otherwise(assignment)
        )
    return dates.to_frame().select(assignment.alias(SPLIT)).get_column(SPLIT)


def assign_group_splits(labels: pl.Series, groups: pl.Series, options: SplitSettings) -> pl.Series:
    """The split of each row such that no group value is in two splits.

    Groups of two or more rows are placed one at a time in an order drawn with the seed, larger
    groups tending to come first (keys u^(1/rows), u uniform: Efraimidis and Spirakis' weighted
    sampling), so that the seed matters even when no two groups are alike. Each goes to the split
    with a non-zero fraction where it least raises the sum over splits s and classes c of
    (n_sc - f_s n_c)^2 / n_c, all rows counted as one more class (n_sc: rows of c in s, n_c: rows
    of c, f_s: the split's fraction). Single rows, and rows without a group value, which share a
    group with no other row, then fill class by class what each split still lacks of the
    stratified strategy's quotas, in a seeded random order.

    Not scikit-learn's StratifiedGroupKFold: it makes equal folds only, loops in Python over every
    row, and its seed only reorders groups with the same class spread, so on a ledger's vendors
    every seed gave the same split.
    """
    seed = options.seed
    min_class_size = options.min_class_size
    check_min_class_size(options)
    shares = fractions(options)
    rng = np.random.default_rng(seed)
    frame = pl.DataFrame({"label": labels, "group": groups}).select(
        (pl.col("label").rank("dense") - 1).cast(pl.Int64).alias("class"),
        (pl.col("group").rank("dense") - 1).cast(pl.Int64).alias("group"),
    )
    frame = frame.with_columns(
        pl.when(pl.col("group").is_not_null())
        .then(pl.len().over("group"))
        .otherwise(1)
        .alias("rows")
    )
    classes = frame.get_column("class").to_numpy()
    n_classes = int(classes.max()) + 1 if len(classes) else 0
    totals = np.bincount(classes, minlength=n_classes).astype(float)
    group_keys = rng.random(int(frame.get_column("group").max() or 0) + 1)
    row_keys = rng.random(frame.height)

    # Whole groups: per group, its rows of each class and, as class n_classes, of all classes.
    cells = frame.filter(pl.col("rows") > 1).group_by("group", "class").len()
    cells = pl.concat(
        [
            cells,
            cells.group_by("group").agg(pl.lit(n_classes, pl.Int64).alias("class"), pl.sum("len")),
        ],
        how="vertical_relaxed",
    ).sort("group", "class")
    cell_group = cells.get_column("group").to_numpy()
    cell_class = cells.get_column("class").to_numpy()
    cell_rows = cells.get_column("len").to_numpy().astype(float)
    bounds = np.flatnonzero(np.diff(cell_group, prepend=-1, append=-1))
    starts, ends = bounds[:-1], bounds[1:]
    ids = cell_group[starts]
    sizes = cell_rows[ends - 1]  # the all-classes cell sorts last
    order = np.argsort(-np.log(group_keys[ids]) / sizes, kind="stable")
    totals_with_all = np.append(totals, totals.sum())
    targets = np.outer(shares, totals_with_all)
    excess = -targets  # rows placed less the target, per split and class
    weighted = cell_rows / np.maximum(totals_with_all, 1)[cell_class]
    closed = np.where(shares > 0, 0.0, np.inf)
    split_of_group = np.full(len(group_keys), -1, dtype=np.int64)
    starts, ends = starts.tolist(), ends.tolist()
    for g in order.tolist():
        cell = slice(starts[g], ends[g])
        column, rows = cell_class[cell], cell_rows[cell]
        # The rise of the sum above from adding the group's rows to each split.
        rise = ((2 * excess[:, column] + rows) * weighted[cell]).sum(axis=1) + closed
        best = int(rise.argmin())
        excess[best, column] += rows
        split_of_group[ids[g]] = best
    placed = excess + targets

    # Single rows: the stratified quotas per class, less what whole groups already placed.
    quotas = pl.DataFrame({"size": totals.astype(np.int64)}).select(
        pl.col("size"),
        pl.min_horizontal(share(pl.col("size"), shares[TEST]), pl.col("size") - 1).alias("test"),
    )
    quotas = quotas.with_columns(
        pl.min_horizontal(
            share(pl.col("size"), shares[VALIDATION]), pl.col("size") - 1 - pl.col("test")
        ).alias("validation")
    ).with_columns(
        pl.when(pl.col("size") < min_class_size).then(0).otherwise(pl.col(name)).alias(name)
        for name in ("test", "validation")
    )
    single = frame.get_column("rows").to_numpy() == 1
    free = np.bincount(classes[single], minlength=n_classes)
    test = np.clip(quotas.get_column("test").to_numpy() - placed[TEST, :n_classes], 0, free)
    validation = np.clip(
        quotas.get_column("validation").to_numpy() - placed[VALIDATION, :n_classes], 0, free - test
    )
    rank = (
        pl.DataFrame({"class": classes[single], "key": row_keys[single]})
        .select(pl.col("key").rank("ordinal").over("class") - 1)
        .to_series()
        .to_numpy()
    )
    codes = np.full(frame.height, TRAIN, dtype=np.int64)
    whole = ~single
    codes[whole] = split_of_group[frame.get_column("group").fill_null(0).to_numpy()[whole]]
    limit = test[classes[single]]
    codes[single] = np.where(
        rank < limit, TEST, np.where(rank < limit + validation[classes[single]], VALIDATION, TRAIN)
    )
    counts = np.bincount(codes, minlength=len(SPLITS))
    empty = [name for name, n, f in zip(SPLITS, counts, shares, strict=True) if f > 0 and n == 0]
    if empty:
        raise DataError(
            f"split.group_column '{groups.name}' has too few groups for a split with a non-zero "
            f"fraction: {empty} would get no rows"
        )
    return SPLIT_OF_CODE.gather(codes)


def strategy_column(spec: DataSpec, columns: list[str], options: SplitSettings) -> str | None:
    """The column the configured strategy splits by (None for `stratified`), checked."""
    check_settings(spec, options)
    if options.strategy == "time":
        return options.date_column
    if options.strategy == "group":
        if options.group_column not in columns:
            raise DataError(
                f"split.strategy 'group' needs split.group_column to name a column of the "
                f"records ({columns}), not {options.group_column!r}"
            )
        return options.group_column
    return None


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


def read_trained_rows(model_dir: Path) -> pl.DataFrame:
    """The id (as text) and label of every record an exported model has learned."""
    path = model_dir / TRAINED_ROWS
    if not path.is_file():
        raise DataError(f"{model_dir}: not a model this workflow exported: no {TRAINED_ROWS}")
    return pl.read_parquet(path, columns=["id", "label"]).with_columns(pl.col("id").cast(pl.String))


def keep_learned_in_train(splits: pl.Series, learned: np.ndarray) -> tuple[pl.Series, int]:
    """`splits` with every learned row in train, and how many were moved there."""
    moved = learned & (splits != "train").to_numpy()
    kept = pl.select(pl.when(pl.Series(moved)).then(pl.lit("train")).otherwise(splits))
    return kept.to_series().cast(SPLIT_DTYPE).alias(SPLIT), int(moved.sum())


def split(
    source: Path,
    spec: DataSpec,
    options: SplitSettings,
    out_dir: Path,
    holdout: int | tuple[str, ...],
    learned: pl.Series | None = None,
) -> dict[str, Any]:
    """Write `<split>.parquet` for each split and `split_report.json`; return the report.
    `learned`: the ids a warm start's model has learned (`read_trained_rows`), kept in train."""
    records = pl.scan_parquet(source)
    strategy = options.strategy
    column = strategy_column(spec, records.collect_schema().names(), options)
    held = records.select(spec.label, *([column] if column else [])).collect(engine="streaming")
    labels = held.get_column(spec.label)
    ids = records.select(pl.col(spec.id or SOURCE_ROW).cast(pl.String)).collect().to_series()
    learned_rows = None if learned is None else ids.is_in(learned.implode()).to_numpy()
    if strategy == "time":
        splits = assign_time_splits(held.get_column(column), options)
    elif strategy == "group":
        splits = assign_group_splits(labels, held.get_column(column), options)
    else:
        splits = assign_splits(labels, options, ids, learned_rows)
    moved = 0
    if learned_rows is not None:
        splits, moved = keep_learned_in_train(splits, learned_rows)
    learned_classes = (
        frozenset() if learned_rows is None else frozenset(labels.filter(learned_rows))
    )
    held_out = holdout_classes(labels, holdout, options.seed, source, learned_classes)
    if held_out:
        splits = (
            pl.select(
                pl.when(labels.is_in(held_out))
                .then(pl.lit("test"))
                .otherwise(splits)
                .cast(SPLIT_DTYPE)
            )
            .to_series()
            .alias(SPLIT)
        )
    assignment = held.with_columns(splits)
    # Only the labels, the date or group column and the assignment are held; every other column
    # streams to its file.
    records = pl.concat([records, assignment.select(SPLIT).lazy()], how="horizontal")
    report: dict[str, Any] = {
        "strategy": strategy,
        "seed": options.seed,
        "rows": labels.len(),
        "holdout_classes": held_out,
        "splits": {},
    }
    if learned_rows is not None:
        # The rows the starting model learned, and those of them moved from validation or test.
        report["learned_rows"] = int(learned_rows.sum())
        report["learned_rows_moved_to_train"] = moved
    paths = {name: out_dir / f"{name}.parquet" for name in SPLITS}
    write_parquets(
        {paths[name]: records.filter(pl.col(SPLIT) == name).drop(SPLIT) for name in SPLITS}
    )
    for name, path in paths.items():
        report["splits"][name] = {"rows": int((splits == name).sum()), "sha256": rows_sha256(path)}
    if strategy == "time":
        report["date_column"] = column
        report["undated_rows"] = held.get_column(column).null_count()
        ranges = assignment.group_by(SPLIT).agg(
            pl.col(column).min().alias("min_date"), pl.col(column).max().alias("max_date")
        )
        for name in SPLITS:
            found = ranges.filter(pl.col(SPLIT) == name)
            for key in ("min_date", "max_date"):
                value = found.get_column(key)[0] if found.height else None
                report["splits"][name][key] = value.isoformat() if value is not None else None
    elif strategy == "group":
        report["group_column"] = column
        groups = assignment.group_by(SPLIT).agg(
            pl.col(column).drop_nulls().n_unique().alias("groups"),
            pl.col(column).null_count().alias("ungrouped_rows"),
        )
        for name in SPLITS:
            found = groups.filter(pl.col(SPLIT) == name)
            for key in ("groups", "ungrouped_rows"):
                report["splits"][name][key] = int(found.get_column(key)[0]) if found.height else 0

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
    # By date no class goes to train for its size: the date decides; a held-out class goes to
    # test whatever its size.
    min_class_size = options.min_class_size
    report["train_only_classes"] = sorted(
        label
        for label, n in labels.value_counts().iter_rows()
        if n < min_class_size and strategy != "time" and label not in held_out
    )
    report["classes_not_in_train"] = {
        name: sorted(
            label for label, n in report["per_class"].items() if n[name] and not n["train"]
        )
        for name in SPLITS[1:]
    }
    assert sum(s["rows"] for s in report["splits"].values()) == labels.len()
    write_json(out_dir / "split_report.json", report)
    log.info(
        "split (%s): %s; %d classes too small to stratify went to train; classes not in train: %s",
        strategy,
        {name: report["splits"][name]["rows"] for name in SPLITS},
        len(report["train_only_classes"]),
        {name: len(found) for name, found in report["classes_not_in_train"].items()},
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
