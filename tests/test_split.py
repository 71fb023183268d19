import dataclasses
import json
import os
import subprocess
import sys
from datetime import date

import numpy as np
import polars as pl
import pytest
from sample_ledger import ledger_config

from account_tax.data.spec import DataSpec
from account_tax.data.split import (
    SPLITS,
    SplitSettings,
    assign_group_splits,
    assign_splits,
    assign_time_splits,
    keep_learned_in_train,
    rows_sha256,
    split,
)
from account_tax.errors import DataError
from account_tax.io import sha256_file


def labels(sizes: dict[str, int]) -> pl.Series:
    return pl.Series([label for label, n in sizes.items() for _ in range(n)])


def test_stratified_shares_per_class():
    series = labels({"big": 100, "mid": 20, "small": 3, "tiny": 2, "one": 1})
    frame = pl.DataFrame(
        {"label": series, "split": assign_splits(series, SplitSettings.of({"seed": 1}))}
    )
    counts = {
        (label, name): n for label, name, n in frame.group_by("label", "split").len().iter_rows()
    }
    assert (counts[("big", "train")], counts[("big", "validation")], counts[("big", "test")]) == (
        80,
        10,
        10,
    )
    assert (counts[("mid", "validation")], counts[("mid", "test")]) == (2, 2)
    # At least one row per held-out split once a class is large enough to stratify...
    assert (
        counts[("small", "train")],
        counts[("small", "validation")],
        counts[("small", "test")],
    ) == (
        1,
        1,
        1,
    )
    # ...and smaller classes go to train whole.
    assert counts[("tiny", "train")] == 2
    assert counts[("one", "train")] == 1
    assert ("tiny", "test") not in counts


def test_same_seed_same_split_other_seed_other_split():
    series = labels({"a": 50, "b": 50})
    first = assign_splits(series, SplitSettings.of({"seed": 5})).to_list()
    assert first == assign_splits(series, SplitSettings.of({"seed": 5})).to_list()
    assert first != assign_splits(series, SplitSettings.of({"seed": 6})).to_list()


def test_zero_validation_fraction_gives_no_validation_rows():
    series = labels({"a": 30, "b": 4})
    result = assign_splits(
        series, SplitSettings.of({"seed": 1, "validation_fraction": 0, "min_class_size": 2})
    )
    assert "validation" not in result.to_list()
    assert result.to_list().count("test") == 3 + 1


def test_min_class_size_must_leave_a_training_row():
    with pytest.raises(DataError, match="must exceed the number of held-out splits"):
        assign_splits(labels({"a": 10}), SplitSettings.of({"min_class_size": 2}))


def test_split_files_report_and_hashes(tmp_path):
    source = tmp_path / "features.parquet"
    sizes = {"4930": 40, "4210": 10, "4970": 2}
    pl.DataFrame(
        {
            "source_row": range(1, 53),
            "entry_id": [f"e{i}" for i in range(52)],
            "account": labels(sizes),
        }
    ).write_parquet(source)
    spec = DataSpec.from_config(ledger_config(tmp_path / "x.csv"))
    report = split(source, spec, SplitSettings.of({"seed": 3}), tmp_path / "split", 0)

    on_disk = json.loads((tmp_path / "split" / "split_report.json").read_text())
    assert on_disk == report
    frames = {name: pl.read_parquet(tmp_path / "split" / f"{name}.parquet") for name in SPLITS}
    assert sum(frame.height for frame in frames.values()) == 52
    ids = [i for frame in frames.values() for i in frame.get_column("entry_id").to_list()]
    assert len(set(ids)) == 52
    assert report["per_class"]["4930"] == {"train": 32, "validation": 4, "test": 4}
    assert report["per_class"]["4970"] == {"train": 2, "validation": 0, "test": 0}
    assert report["train_only_classes"] == ["4970"]
    assert all(len(report["splits"][name]["sha256"]) == 64 for name in SPLITS)

    again = split(source, spec, SplitSettings.of({"seed": 3}), tmp_path / "again", 0)
    assert again["splits"] == report["splits"]


def growing_ledger(tmp_path, name: str, rows: int, seed: int) -> tuple:
    """A ledger of `rows` records of two accounts (ids e0, e1, ...), in a shuffled order."""
    order = np.random.default_rng(seed).permutation(rows)
    frame = pl.DataFrame(
        {
            "source_row": range(1, rows + 1),
            "entry_id": [f"e{i}" for i in order],
            "account": ["4930" if i % 3 else "4210" for i in order],
        }
    )
    source = tmp_path / f"{name}.parquet"
    frame.write_parquet(source)
    return source, DataSpec.from_config(ledger_config(tmp_path / "x.csv"))


def split_ids(folder) -> dict[str, set[str]]:
    return {
        name: set(pl.read_parquet(folder / f"{name}.parquet").get_column("entry_id").to_list())
        for name in SPLITS
    }


def test_a_record_keeps_its_side_as_the_ledger_grows_and_its_rows_move(tmp_path):
    options = SplitSettings.of({"seed": 3})
    before, spec = growing_ledger(tmp_path, "before", 300, seed=1)
    split(before, spec, options, tmp_path / "before", 0)
    shuffled, _ = growing_ledger(tmp_path, "shuffled", 300, seed=5)
    split(shuffled, spec, options, tmp_path / "shuffled", 0)
    assert split_ids(tmp_path / "shuffled") == split_ids(tmp_path / "before")

    after, _ = growing_ledger(tmp_path, "after", 390, seed=2)
    split(after, spec, options, tmp_path / "after", 0)
    was, now = split_ids(tmp_path / "before"), split_ids(tmp_path / "after")
    for name in SPLITS:
        assert len(was[name] & now[name]) >= 0.9 * len(was[name]), name
    split(before, spec, SplitSettings.of({"seed": 4}), tmp_path / "other-seed", 0)
    assert split_ids(tmp_path / "other-seed") != was


def test_a_warm_starts_split_keeps_what_its_model_learned_in_train(tmp_path):
    """A month later the ledger has grown: drawn afresh, a few records the model of last month
    trained on, which a warm start continues, cross into validation or test."""
    options = SplitSettings.of({"seed": 3})
    before, spec = growing_ledger(tmp_path, "before", 300, seed=1)
    split(before, spec, options, tmp_path / "before", 0)
    learned = pl.Series(sorted(split_ids(tmp_path / "before")["train"]))
    after, _ = growing_ledger(tmp_path, "after", 390, seed=2)

    split(after, spec, options, tmp_path / "afresh", 0)
    afresh = split_ids(tmp_path / "afresh")
    assert (afresh["validation"] | afresh["test"]) & set(learned)

    report = split(after, spec, options, tmp_path / "warm", 0, learned)
    warm = split_ids(tmp_path / "warm")
    assert not (warm["validation"] | warm["test"]) & set(learned)
    assert learned.len() == 240 and set(learned) <= warm["train"]
    # The held-out shares are as large as afresh: drawn from the records the model has not seen.
    assert {name: len(ids) for name, ids in warm.items()} == {
        name: len(ids) for name, ids in afresh.items()
    }
    assert (report["learned_rows"], report["learned_rows_moved_to_train"]) == (240, 0)
    assert json.loads((tmp_path / "warm" / "split_report.json").read_text()) == report


def test_a_warm_start_holds_out_no_class_its_model_has_learned(tmp_path):
    """Held out, a class's rows all go to test, the learned ones too: only the classes the model
    has no learned row of are drawn, and naming another is refused."""
    accounts = ["4930"] * 30 + ["4210"] * 30 + ["4400"] * 30
    pl.DataFrame(
        {
            "source_row": range(1, 91),
            "entry_id": [f"e{i}" for i in range(90)],
            "account": accounts,
        }
    ).write_parquet(tmp_path / "records.parquet")
    spec = DataSpec.from_config(ledger_config(tmp_path / "x.csv"))
    options = SplitSettings.of({"seed": 3})
    # The model learned a few rows of 4930 and 4210.
    learned = pl.Series(["e0", "e1", "e30", "e31"])
    for seed in range(5):
        report = split(
            tmp_path / "records.parquet",
            spec,
            dataclasses.replace(options, seed=seed),
            tmp_path / f"s{seed}",
            1,
            learned,
        )
        assert report["holdout_classes"] == ["4400"]
        assert not split_ids(tmp_path / f"s{seed}")["test"] & set(learned)
    with pytest.raises(DataError, match=r"names \['4930'\], which the model that train.init_from"):
        split(tmp_path / "records.parquet", spec, options, tmp_path / "n", ("4930",), learned)
    with pytest.raises(DataError, match=r"only 1 classes .* no row the model of train.init_from"):
        split(tmp_path / "records.parquet", spec, options, tmp_path / "t", 2, learned)


def test_learned_records_stay_in_train_even_where_too_few_others_are_left(tmp_path):
    # 19 of a class's 20 records learned: its two validation and two test rows cannot all be new.
    series = labels({"4930": 20})
    learned = np.arange(20) > 0
    plain = assign_splits(series, SplitSettings.of({"seed": 1}))
    ranked = assign_splits(series, SplitSettings.of({"seed": 1}), learned=learned)
    kept, moved = keep_learned_in_train(ranked, learned)
    assert (ranked[0] != "train") and (plain == "train").sum() == 16
    assert moved == 3
    assert kept.to_list() == [ranked[0]] + ["train"] * 19


def test_a_time_split_moves_learned_records_out_of_the_latest_dates(tmp_path):
    frame = ledger_rows(100)
    source, spec = write_ledger(tmp_path, frame)
    options = SplitSettings.of(strategy="time", date_column="date", seed=3)
    afresh = split(source, spec, options, tmp_path / "afresh", 0)
    latest = frame.sort("date").get_column("entry_id").tail(5)
    report = split(source, spec, options, tmp_path / "warm", 0, latest)
    warm = split_ids(tmp_path / "warm")
    assert set(latest) <= warm["train"]
    assert report["learned_rows_moved_to_train"] == 5
    assert report["splits"]["train"]["rows"] == afresh["splits"]["train"]["rows"] + 5


SPLIT_IN_SUBPROCESS = """
import json, sys
from pathlib import Path
from account_tax.data.spec import DataSpec
from account_tax.data.split import SplitSettings, split
config = json.loads(sys.argv[1])
spec = DataSpec.from_config(config)
report = split(Path(sys.argv[2]), spec, SplitSettings.of(seed=3), Path(sys.argv[3]), 0)
print(json.dumps({name: s["sha256"] for name, s in report["splits"].items()}))
"""


def test_split_hashes_do_not_depend_on_the_thread_count(tmp_path):
    """The split files' bytes differ with POLARS_MAX_THREADS (row groups); their hashes do not."""
    rows = 300_000
    source = tmp_path / "features.parquet"
    pl.DataFrame(
        {
            "source_row": range(1, rows + 1),
            "entry_id": [f"e{i}" for i in range(rows)],
            "account": [f"{4000 + i % 37}" for i in range(rows)],
            "amount": [i * 0.25 for i in range(rows)],
        }
    ).write_parquet(source)
    config = ledger_config(tmp_path / "x.csv")
    hashes, files = {}, {}
    for threads in (1, 2):
        out = tmp_path / f"threads-{threads}"
        result = subprocess.run(
            [sys.executable, "-c", SPLIT_IN_SUBPROCESS, json.dumps(config), str(source), str(out)],
            env=os.environ | {"POLARS_MAX_THREADS": str(threads)},
            capture_output=True,
            text=True,
            check=True,
        )
        hashes[threads] = json.loads(result.stdout.strip().splitlines()[-1])
        files[threads] = {name: sha256_file(out / f"{name}.parquet") for name in SPLITS}
    assert files[1] != files[2], "the files should differ in bytes, or this test proves nothing"
    assert hashes[1] == hashes[2]
    # The rows are the same; the hash must also tell different rows apart.
    train_1 = pl.read_parquet(tmp_path / "threads-1" / "train.parquet")
    train_2 = pl.read_parquet(tmp_path / "threads-2" / "train.parquet")
    assert train_1.equals(train_2)
    changed = tmp_path / "changed.parquet"
    train_1.with_columns(pl.col("amount").shift(1, fill_value=-1.0)).write_parquet(changed)
    assert rows_sha256(changed) != hashes[1]["train"]
    assert rows_sha256(tmp_path / "threads-1" / "train.parquet") == hashes[1]["train"]


def ledger_rows(days: int, seed: int = 0) -> pl.DataFrame:
    """Postings on `days` consecutive days, 1 to 30 a day, from 40 vendors of skewed size, each
    booking mostly to its own account of 6."""
    rng = np.random.default_rng(seed)
    per_day = rng.integers(1, 31, days)
    n = int(per_day.sum())
    first = np.datetime64("2024-01-01")
    vendor = rng.zipf(1.5, n) % 40
    account = np.where(rng.random(n) < 0.8, vendor % 6, rng.integers(0, 6, n))
    return pl.DataFrame(
        {
            "source_row": range(1, n + 1),
            "entry_id": [f"e{i}" for i in range(n)],
            "date": np.repeat(first + np.arange(days), per_day),
            "vendor": [f"v{v}" for v in vendor],
            "account": [f"{4000 + a}" for a in account],
        }
    )


def test_time_split_orders_the_dates_and_keeps_each_date_whole():
    frame = ledger_rows(200)
    frame = frame.with_columns(
        assign_time_splits(frame.get_column("date"), SplitSettings.of({"seed": 1}))
    )
    spans = {
        name: (part.get_column("date").min(), part.get_column("date").max())
        for (name,), part in frame.group_by("split")
    }
    # Strictly before: no training row later than, or on the same date as, a held-out row.
    assert spans["train"][1] < spans["validation"][0]
    assert spans["validation"][1] < spans["test"][0]
    assert frame.group_by("date").agg(pl.col("split").n_unique()).get_column("split").max() == 1
    # Each boundary is the nearest a date boundary can come to its share: off by at most half
    # a day's rows.
    half_a_day = frame.group_by("date").len().get_column("len").max() / 2
    for name in ("validation", "test"):
        assert abs((frame.get_column("split") == name).sum() - 0.1 * frame.height) <= half_a_day


def test_time_split_takes_no_seed_and_no_row_order():
    frame = ledger_rows(60)
    first = frame.with_columns(
        assign_time_splits(frame.get_column("date"), SplitSettings.of({"seed": 1}))
    )
    shuffled = frame.sample(fraction=1, shuffle=True, seed=3)
    again = shuffled.with_columns(
        assign_time_splits(shuffled.get_column("date"), SplitSettings.of({"seed": 2}))
    )
    assert again.sort("entry_id").equals(first.sort("entry_id"))


def test_time_split_rows_without_a_date_go_to_train():
    dates = pl.Series("date", [date(2024, 1, d) for d in range(1, 11)] + [None, None])
    result = assign_time_splits(dates, SplitSettings.of()).to_list()
    assert result[-2:] == ["train", "train"]
    assert result[:10] == ["train"] * 8 + ["validation", "test"]


def test_time_split_with_no_validation_fraction():
    dates = pl.Series("date", [date(2024, 1, d) for d in range(1, 11)])
    result = assign_time_splits(
        dates, SplitSettings.of({"validation_fraction": 0, "test_fraction": 0.3})
    )
    assert result.to_list() == ["train"] * 7 + ["test"] * 3


def test_time_split_needs_a_date_for_every_split():
    dates = pl.Series("date", [date(2024, 1, 1)] * 5 + [date(2024, 1, 2)] * 5)
    with pytest.raises(DataError, match=r"needs at least 3 distinct dates in column 'date'.*has 2"):
        assign_time_splits(dates, SplitSettings.of())
    # A held-out split gets its date even when its share would round to none.
    assert assign_time_splits(dates, SplitSettings.of({"validation_fraction": 0})).to_list() == (
        ["train"] * 5 + ["test"] * 5
    )


def group_split(frame: pl.DataFrame, seed: int) -> pl.DataFrame:
    return frame.with_columns(
        assign_group_splits(
            frame.get_column("account"),
            frame.get_column("vendor"),
            SplitSettings.of({"seed": seed}),
        )
    )


def test_group_split_keeps_every_group_whole_in_one_split():
    frame = group_split(ledger_rows(300), seed=1)
    assert frame.group_by("vendor").agg(pl.col("split").n_unique()).get_column("split").max() == 1
    vendors = {
        name: set(frame.filter(pl.col("split") == name).get_column("vendor")) for name in SPLITS
    }
    assert not vendors["train"] & vendors["validation"]
    assert not vendors["train"] & vendors["test"]
    assert not vendors["validation"] & vendors["test"]
    # Stratified as far as the groups allow: every class is trained on, each held-out split has
    # most classes and roughly its share.
    per_class = frame.group_by("account", "split").len()
    assert per_class.filter(pl.col("split") == "train").height == 6
    for name in ("validation", "test"):
        assert per_class.filter(pl.col("split") == name).height >= 4
        assert 0.05 < (frame.get_column("split") == name).mean() < 0.15


def test_group_split_same_seed_same_split_other_seed_other_split():
    frame = ledger_rows(300)
    first = group_split(frame, seed=5).get_column("split")
    assert first.equals(group_split(frame, seed=5).get_column("split"))
    assert not first.equals(group_split(frame, seed=6).get_column("split"))


def test_group_split_gives_a_split_with_no_fraction_no_rows():
    frame = ledger_rows(300)
    options = SplitSettings.of(validation_fraction=0, test_fraction=0.2)
    result = assign_group_splits(frame.get_column("account"), frame.get_column("vendor"), options)
    assert "validation" not in result.to_list()
    assert 0.1 < (result == "test").mean() < 0.3


def test_group_split_places_rows_without_a_group_like_the_stratified_split():
    series = labels({"big": 100, "mid": 20, "small": 3, "tiny": 2})
    groups = pl.Series("vendor", [None] * len(series), dtype=pl.String)
    grouped = pl.DataFrame(
        {"label": series, "split": assign_group_splits(series, groups, SplitSettings.of())}
    )
    stratified = pl.DataFrame({"label": series, "split": assign_splits(series, SplitSettings.of())})

    def counts(frame):
        return sorted(frame.group_by("label", "split").len().iter_rows())

    assert counts(grouped) == counts(stratified)


def test_group_split_needs_enough_groups():
    series = labels({"a": 30, "b": 30})
    groups = pl.Series("vendor", ["one"] * 30 + ["two"] * 30)
    with pytest.raises(DataError, match=r"'vendor' has too few groups.*'validation'"):
        assign_group_splits(series, groups, SplitSettings.of())


def write_ledger(tmp_path, frame: pl.DataFrame) -> tuple:
    source = tmp_path / "features.parquet"
    frame.write_parquet(source)
    return source, DataSpec.from_config(ledger_config(tmp_path / "x.csv"))


def test_time_split_report(tmp_path):
    frame = ledger_rows(100).with_columns(
        pl.when(pl.int_range(pl.len()) < 2).then(None).otherwise(pl.col("date")).alias("date")
    )
    source, spec = write_ledger(tmp_path, frame)
    options = SplitSettings.of(strategy="time", date_column="date", seed=3)
    report = split(source, spec, options, tmp_path / "split", 0)

    assert json.loads((tmp_path / "split" / "split_report.json").read_text()) == report
    assert report["strategy"] == "time"
    assert report["date_column"] == "date"
    assert report["undated_rows"] == 2
    written = {name: pl.read_parquet(tmp_path / "split" / f"{name}.parquet") for name in SPLITS}
    for name, part in written.items():
        assert report["splits"][name]["rows"] == part.height
        assert report["splits"][name]["min_date"] == part.get_column("date").min().isoformat()
        assert report["splits"][name]["max_date"] == part.get_column("date").max().isoformat()
    assert written["train"].get_column("date").null_count() == 2
    assert report["splits"]["test"]["max_date"] == frame.get_column("date").max().isoformat()
    assert report["train_only_classes"] == []


def test_classes_not_in_train_on_a_hand_made_ledger(tmp_path):
    # Days 1-8 (a posting each) go to train, day 9 to validation, day 10 (three postings) to
    # test. 9999, 1800 and 0100 are first booked on the last two days; 4930 throughout.
    frame = pl.DataFrame(
        {
            "source_row": range(1, 13),
            "entry_id": [f"e{i}" for i in range(12)],
            "date": [date(2024, 1, d) for d in range(1, 11)] + [date(2024, 1, 10)] * 2,
            "vendor": ["acme"] * 12,
            "account": ["4930"] * 8 + ["9999", "1800", "4930", "0100"],
        }
    )
    source, spec = write_ledger(tmp_path, frame)
    report = split(
        source,
        spec,
        SplitSettings.of({"strategy": "time", "date_column": "date"}),
        tmp_path / "split",
        0,
    )
    assert [report["splits"][name]["rows"] for name in SPLITS] == [8, 1, 3]
    assert report["classes_not_in_train"] == {"validation": ["9999"], "test": ["0100", "1800"]}
    stratified = split(
        source, spec, SplitSettings.of({"min_class_size": 3}), tmp_path / "stratified", 0
    )
    assert stratified["strategy"] == "stratified"
    # Classes too small to stratify go to train: none is held out without training rows.
    assert stratified["classes_not_in_train"] == {"validation": [], "test": []}
    assert stratified["train_only_classes"] == ["0100", "1800", "9999"]


def test_group_split_report(tmp_path):
    frame = ledger_rows(300).with_columns(
        pl.when(pl.int_range(pl.len()) % 50 == 0)
        .then(None)
        .otherwise(pl.col("vendor"))
        .alias("vendor")
    )
    source, spec = write_ledger(tmp_path, frame)
    options = SplitSettings.of(strategy="group", group_column="vendor", seed=3)
    report = split(source, spec, options, tmp_path / "split", 0)

    assert report["strategy"] == "group"
    assert report["group_column"] == "vendor"
    written = {name: pl.read_parquet(tmp_path / "split" / f"{name}.parquet") for name in SPLITS}
    for name, part in written.items():
        vendor = part.get_column("vendor")
        assert report["splits"][name]["groups"] == vendor.drop_nulls().n_unique()
        assert report["splits"][name]["ungrouped_rows"] == vendor.null_count()
    assert sum(report["splits"][name]["groups"] for name in SPLITS) == (
        frame.get_column("vendor").drop_nulls().n_unique()
    )
    assert sum(report["splits"][name]["ungrouped_rows"] for name in SPLITS) == (
        frame.get_column("vendor").null_count()
    )
    again = split(source, spec, options, tmp_path / "again", 0)
    assert again["splits"] == report["splits"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"strategy": "time"}, "needs split.date_column to name one of the data's date columns"),
        ({"strategy": "time", "date_column": "vendor"}, r"data.columns.date: \['date'\]"),
        ({"strategy": "group"}, "needs split.group_column to name a column of the records$"),
        ({"strategy": "group", "group_column": "customer"}, "not 'customer'"),
        ({"strategy": "group", "group_column": "account"}, "cannot be the label column"),
    ],
)
def test_configuration_errors(tmp_path, options, message):
    source, spec = write_ledger(tmp_path, ledger_rows(20))
    with pytest.raises(DataError, match=message):
        split(source, spec, SplitSettings.of(options), tmp_path / "split", 0)
    assert not (tmp_path / "split").exists()


def holdout_ledger(tmp_path):
    sizes = {
        str(code): size
        for code, size in zip(range(4000, 4010), [30, 12, 8, 5, 4, 3, 3, 2, 1, 40], strict=True)
    }
    frame = pl.DataFrame(
        {
            "source_row": range(1, sum(sizes.values()) + 1),
            "entry_id": [f"e{i}" for i in range(sum(sizes.values()))],
            "account": labels(sizes),
        }
    )
    source = tmp_path / "features.parquet"
    frame.write_parquet(source)
    return source, DataSpec.from_config(ledger_config(tmp_path / "x.csv")), sizes


@pytest.mark.parametrize("strategy", ["stratified", "group"])
def test_held_out_classes_go_wholly_to_test_and_are_drawn_by_seed(tmp_path, strategy):
    source, spec, sizes = holdout_ledger(tmp_path)
    options = {"seed": 3, "strategy": strategy}
    if strategy == "group":
        options["group_column"] = "entry_id"
    report = split(source, spec, SplitSettings.of(options), tmp_path / "a", holdout=3)
    held = report["holdout_classes"]
    assert len(held) == 3 and held == sorted(held)
    # Only classes with at least 3 rows: a held-out class needs test rows to measure.
    assert all(sizes[code] >= 3 for code in held)
    for code in held:
        assert report["per_class"][code] == {"train": 0, "validation": 0, "test": sizes[code]}
    assert report["classes_not_in_train"]["test"] == held
    frames = {name: pl.read_parquet(tmp_path / "a" / f"{name}.parquet") for name in SPLITS}
    assert sum(frame.height for frame in frames.values()) == sum(sizes.values())
    for name in ("train", "validation"):
        assert not frames[name].get_column("account").is_in(held).any()

    assert (
        split(source, spec, SplitSettings.of(options), tmp_path / "b", 3)["holdout_classes"] == held
    )
    others = {
        tuple(
            split(source, spec, SplitSettings.of(options, seed=seed), tmp_path / f"s{seed}", 3)[
                "holdout_classes"
            ]
        )
        for seed in range(4, 9)
    }
    assert len(others | {tuple(held)}) > 1


def test_held_out_classes_by_code_and_their_errors(tmp_path):
    source, spec, _ = holdout_ledger(tmp_path)
    report = split(
        source, spec, SplitSettings.of({"seed": 3}), tmp_path / "a", holdout=["4008", "4001"]
    )
    assert report["holdout_classes"] == ["4001", "4008"]
    assert report["per_class"]["4008"] == {"train": 0, "validation": 0, "test": 1}
    # Too small to stratify, but held out: in test, so not among the classes sent to train.
    assert "4008" not in report["train_only_classes"] and "4007" in report["train_only_classes"]
    with pytest.raises(DataError, match=r"names \['9999'\], which have no rows in .*features"):
        split(source, spec, SplitSettings.of({"seed": 3}), tmp_path / "b", holdout=["4001", "9999"])
    with pytest.raises(DataError, match=r"is 9, but only 8 classes .* have at least 3 rows"):
        split(source, spec, SplitSettings.of({"seed": 3}), tmp_path / "c", holdout=9)
    assert (
        split(source, spec, SplitSettings.of({"seed": 3}), tmp_path / "d", 0)["holdout_classes"]
        == []
    )
