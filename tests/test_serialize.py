import json
from datetime import date

import polars as pl
import pytest
from sample_ledger import ledger_config

from account_tax.data.serialize import SerializeSettings, serialize
from account_tax.data.spec import DataSpec
from account_tax.errors import DataError


@pytest.fixture
def split_file(tmp_path):
    path = tmp_path / "train.parquet"
    pl.DataFrame(
        {
            "source_row": [1, 2, 3],
            "entry_id": ["a", "b", "c"],
            "memo": ["office chairs", None, "rent"],
            "vendor": ["acme", "globex", None],
            "amount": [1234.5, 2021.0, 0.12345],
            "date": [date(2024, 1, 1)] * 3,
            "account": ["4930", "4210", None],
        }
    ).write_parquet(path)
    label_map = tmp_path / "label_map.json"
    write_label_map(label_map, ["4210", "4930", "1800"])
    return path, label_map


def write_label_map(path, labels, **fields):
    """A label map as features writes it: the ledger's account column, one row of each class."""
    mapping = {"label_column": "account", "labels": labels, "counts": dict.fromkeys(labels, 1)}
    path.write_text(json.dumps(mapping | fields))


def run(tmp_path, split_file, options, spec=None):
    path, label_map = split_file
    spec = spec or DataSpec.from_config(ledger_config(tmp_path / "x.csv"))
    out = tmp_path / "out.parquet"
    serialize(path, spec, SerializeSettings.of(options), label_map, out)
    return pl.read_parquet(out)


def test_text_in_configured_order_with_names_and_nulls_left_out(tmp_path, split_file):
    options = {
        "fields": [
            {"column": "memo", "name": "memo text"},
            {"column": "vendor"},
            {"column": "amount"},
        ],
        "float_decimals": 2,
    }
    frame = run(tmp_path, split_file, options)
    assert frame.columns == ["id", "text", "label_id", "label_source"]
    assert set(frame["label_source"]) == {"ledger"}  # no corrections
    assert frame.get_column("text").to_list() == [
        "memo text: office chairs | vendor: acme | amount: 1234.5",
        "vendor: globex | amount: 2021",
        "memo text: rent | amount: 0.12",
    ]
    assert frame.get_column("id").to_list() == ["a", "b", "c"]


def test_label_ids_follow_the_label_map(tmp_path, split_file):
    frame = run(tmp_path, split_file, {"fields": [{"column": "memo"}]})
    assert frame.get_column("label_id").to_list() == [1, 0, None]
    assert frame.schema["label_id"] == pl.Int32


def test_custom_template_and_separator(tmp_path, split_file):
    options = {
        "fields": [{"column": "memo"}, {"column": "vendor"}],
        "template": "[{name}] {value}",
        "separator": "; ",
    }
    frame = run(tmp_path, split_file, options)
    assert frame.get_column("text")[0] == "[memo] office chairs; [vendor] acme"


def test_unknown_field_names_the_file_and_column(tmp_path, split_file):
    with pytest.raises(
        DataError, match=r"missing required column\(s\) 'colour'.*serialize\.fields"
    ):
        run(tmp_path, split_file, {"fields": [{"column": "colour"}]})


@pytest.mark.parametrize("column", ["account", "label_source"])
def test_a_field_that_gives_the_account_away_is_refused(tmp_path, split_file, column):
    """The label, or where it came from, in the text: the model would read the answer off it."""
    fields = {"fields": [{"column": "memo"}, {"column": column}]}
    with pytest.raises(DataError, match=rf"`serialize.fields` names '{column}', which gives"):
        run(tmp_path, split_file, fields)
    assert not (tmp_path / "out.parquet").exists()


def test_label_missing_from_label_map_names_the_row(tmp_path, split_file):
    _, label_map = split_file
    write_label_map(label_map, ["4930"])
    with pytest.raises(DataError, match=r"missing from .*label_map\.json: row 2 \('4210'\)"):
        run(tmp_path, split_file, {"fields": [{"column": "memo"}]})


def test_ids_default_to_the_source_row(tmp_path, split_file):
    config = ledger_config(tmp_path / "x.csv")
    config["data"]["columns"]["id"] = None
    frame = run(
        tmp_path, split_file, {"fields": [{"column": "memo"}]}, DataSpec.from_config(config)
    )
    assert frame.get_column("id").to_list() == ["1", "2", "3"]


def test_class_texts_add_one_record_per_named_account_that_takes_postings(tmp_path, split_file):
    """Named, postable accounts become records of their own; a group (not postable) and an
    account without a name do not."""
    path, label_map = split_file
    write_label_map(
        label_map,
        ["4210", "4930", "1800", "4000"],
        names=["Rent", "Office supplies", None, "Expenses"],
        descriptions=[None, "chairs, desks, paper", None, None],
        postable=[True, True, True, False],
    )
    spec = DataSpec.from_config(ledger_config(tmp_path / "x.csv"))
    options = SerializeSettings.of({"fields": [{"column": "memo"}]})
    out = tmp_path / "out.parquet"
    assert serialize(path, spec, options, label_map, out, with_class_texts=True) == 5
    frame = pl.read_parquet(out)
    assert frame.filter(pl.col("label_source") == "ledger")["id"].to_list() == ["a", "b", "c"]
    chart = frame.filter(pl.col("label_source") == "chart")
    assert chart.rows() == [
        ("class:4210", "Rent", 0, "chart"),
        ("class:4930", "Office supplies: chairs, desks, paper", 1, "chart"),
    ]
    # Without the option (validation and test, or class_texts off) only the split's records.
    assert serialize(path, spec, options, label_map, out) == 3
