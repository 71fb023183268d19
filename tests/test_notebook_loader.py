"""`account_tax.load` finds a stage's outputs by the workflow's layout and names what it has."""

import json

import polars as pl
import pytest

import account_tax
from account_tax.errors import DataError


@pytest.fixture
def workdir(tmp_path):
    split = tmp_path / "results" / "split"
    split.mkdir(parents=True)
    for name in ("train", "test"):
        pl.DataFrame({"id": [name], "label": ["4930"]}).write_parquet(split / f"{name}.parquet")
    (split / "split_report.json").write_text(json.dumps({"rows": 2}))
    (split / "split_distribution.png").write_bytes(b"\x89PNG")
    # Trained in segments: the last one (by number, not by name) holds the trained model's.
    for segment, steps in ((2, 1), (10, 3)):
        train = tmp_path / "results" / "train" / f"segment-{segment}"
        train.mkdir(parents=True)
        (train / "metrics.json").write_text(json.dumps({"steps": steps}))
        history = "".join(json.dumps({"step": step}) + "\n" for step in range(1, steps))
        (train / "history.jsonl").write_text(history)
    return tmp_path


def test_a_part_by_name_and_type(workdir):
    assert account_tax.load("split", "test", workdir)["id"].to_list() == ["test"]
    assert account_tax.load("split", "split_report", workdir) == {"rows": 2}
    assert account_tax.load("train", "history", workdir)["step"].to_list() == [1, 2]
    # Without a part: the metrics (or records, or the model) where the stage has them.
    assert account_tax.load("train", workdir=workdir) == {"steps": 3}


def test_unknown_or_ambiguous_parts_name_what_exists(workdir):
    with pytest.raises(
        DataError, match=r"several outputs; name one of \['split_report', 'test', 'train'\]"
    ):
        account_tax.load("split", workdir=workdir)
    with pytest.raises(DataError, match="no output 'validation'"):
        account_tax.load("split", "validation", workdir)
    with pytest.raises(DataError, match="no outputs of stage 'evaluate'"):
        account_tax.load("evaluate", workdir=workdir)
    with pytest.raises(DataError, match="no MLflow store"):
        account_tax.runs(workdir)
