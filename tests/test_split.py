import json
import os
import subprocess
import sys

import polars as pl
import pytest
from sample_ledger import ledger_config

from account_tax.io import sha256_file
from account_tax.settings import DataSpec
from account_tax.split import SPLITS, assign_splits, rows_sha256, split


def labels(sizes: dict[str, int]) -> pl.Series:
    return pl.Series([label for label, n in sizes.items() for _ in range(n)])


def test_stratified_shares_per_class():
    series = labels({"big": 100, "mid": 20, "small": 3, "tiny": 2, "one": 1})
    frame = pl.DataFrame({"label": series, "split": assign_splits(series, {"seed": 1})})
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
    first = assign_splits(series, {"seed": 5}).to_list()
    assert first == assign_splits(series, {"seed": 5}).to_list()
    assert first != assign_splits(series, {"seed": 6}).to_list()


def test_zero_validation_fraction_gives_no_validation_rows():
    series = labels({"a": 30, "b": 4})
    result = assign_splits(series, {"seed": 1, "validation_fraction": 0, "min_class_size": 2})
    assert "validation" not in result.to_list()
    assert result.to_list().count("test") == 3 + 1


def test_min_class_size_must_leave_a_training_row():
    with pytest.raises(ValueError, match="must exceed the number of held-out splits"):
        assign_splits(labels({"a": 10}), {"min_class_size": 2})


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
    report = split(source, spec, {"seed": 3}, tmp_path / "split")

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

    again = split(source, spec, {"seed": 3}, tmp_path / "again")
    assert again["splits"] == report["splits"]


SPLIT_IN_SUBPROCESS = """
import json, sys
from pathlib import Path
from account_tax.settings import DataSpec
from account_tax.split import split
config = json.loads(sys.argv[1])
report = split(Path(sys.argv[2]), DataSpec.from_config(config), {"seed": 3}, Path(sys.argv[3]))
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
