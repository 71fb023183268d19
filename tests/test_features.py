import json
import math
from datetime import date
from pathlib import Path

import polars as pl
import pytest
from sample_ledger import ledger_config

from account_tax.data.clean import CleanSettings, clean
from account_tax.data.features import (
    FeatureSettings,
    build_features,
    signed_log10,
    signed_magnitude,
)
from account_tax.data.ingest import ingest
from account_tax.data.label_map import LabelMap
from account_tax.data.spec import DataSpec
from account_tax.errors import DataError
from account_tax.settings import load_settings

REPO = Path(__file__).resolve().parents[1]


def clean_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "source_row": [1, 2, 3, 4],
            "entry_id": ["a", "b", "c", "d"],
            "date": [date(2024, 1, 1), date(2024, 6, 15), None, date(2023, 12, 31)],
            "vendor": ["acme", "acme", "globex", None],
            "memo": ["invoice 2024-117 chairs", "rent june", "fee 5", None],
            "amount": [1234.5, -0.5, 0.0, None],
            "account": ["4930", "4210", "4930", "4970"],
        }
    )


@pytest.fixture
def built(tmp_path):
    source = tmp_path / "clean.parquet"
    clean_frame().write_parquet(source)
    config = ledger_config(tmp_path / "ledger.csv", classes=["4210", "4930", "4970", "1800"])
    spec = DataSpec.from_config(config)
    out, label_map = tmp_path / "features.parquet", tmp_path / "label_map.json"
    mapping = build_features(source, spec, FeatureSettings.of(config["features"]), out, label_map)
    return pl.read_parquet(out), mapping, LabelMap.read(label_map)


def test_date_parts(built):
    frame, _, _ = built
    assert frame.get_column("date_year").to_list() == [2024, 2024, None, 2023]
    assert frame.get_column("date_month").to_list() == [1, 6, None, 12]
    assert frame.get_column("date_weekday").to_list() == [1, 6, None, 7]


def test_amount_log_and_magnitude():
    amounts = pl.Series([1234.5, -0.5, 0.0, 9.0, 10.0, None])
    logs = pl.select(signed_log10(pl.lit(amounts))).to_series().to_list()
    assert logs[:5] == [
        pytest.approx(3.092, abs=1e-3),
        pytest.approx(-0.176, abs=1e-3),
        0,
        1,
        1.041,
    ]
    assert logs[5] is None
    magnitudes = pl.select(signed_magnitude(pl.lit(amounts))).to_series().to_list()
    assert magnitudes == ["+1e3", "-1e0", "0", "+1e0", "+1e1", None]


def test_magnitude_is_exact_at_every_power_of_ten():
    powers = [10.0**k for k in range(16)]
    just_below = [math.nextafter(power, 0) for power in powers[1:]]
    amounts = pl.Series([*powers, *just_below, *(-power for power in powers)])
    magnitudes = pl.select(signed_magnitude(pl.lit(amounts))).to_series().to_list()
    assert magnitudes == [
        *(f"+1e{k}" for k in range(16)),
        *(f"+1e{k}" for k in range(15)),
        *(f"-1e{k}" for k in range(16)),
    ]


def test_digits_masked_in_configured_text_columns(built):
    frame, _, _ = built
    assert frame.get_column("memo").to_list() == ["invoice #-# chairs", "rent june", "fee #", None]


def test_masking_a_non_text_column_is_refused(tmp_path):
    source = tmp_path / "clean.parquet"
    clean_frame().write_parquet(source)
    config = ledger_config(tmp_path / "ledger.csv")
    with pytest.raises(DataError, match="'vendor', which is not a text column"):
        build_features(
            source,
            DataSpec.from_config(config),
            FeatureSettings.of(mask_digits=["vendor"]),
            tmp_path / "f.parquet",
            tmp_path / "m.json",
        )


def test_label_map_lists_every_class_in_config_order_with_zero_counts(built):
    _, mapping, on_disk = built
    assert on_disk == mapping
    assert mapping.labels == ["4210", "4930", "4970", "1800"]
    assert mapping.counts == {"4210": 1, "4930": 2, "4970": 1, "1800": 0}
    assert mapping.label_column == "account"


def test_label_map_from_data_is_sorted(tmp_path):
    source = tmp_path / "clean.parquet"
    clean_frame().write_parquet(source)
    config = ledger_config(tmp_path / "ledger.csv")
    mapping = build_features(
        source,
        DataSpec.from_config(config),
        FeatureSettings.of(),
        tmp_path / "f.parquet",
        tmp_path / "m.json",
    )
    assert mapping.labels == ["4210", "4930", "4970"]


def test_classes_from_a_file(tmp_path):
    classes = tmp_path / "classes.txt"
    classes.write_text("4930\n\n4210\n")
    spec = DataSpec.from_config(ledger_config(tmp_path / "x.csv", classes=str(classes)))
    assert spec.classes == ("4930", "4210")


def test_duplicate_classes_are_refused(tmp_path):
    with pytest.raises(DataError, match=r"^data\.classes: item 2: code '4930' repeats item 1$"):
        DataSpec.from_config(ledger_config(tmp_path / "x.csv", classes=["4930", "4930"]))


def test_label_map_without_a_chart_knows_no_names_descriptions_or_parents(built):
    _, mapping, _ = built
    assert mapping.names == mapping.descriptions == mapping.parents == [None] * 4
    assert mapping.postable == [True] * 4


def test_label_map_takes_names_descriptions_and_parents_from_a_chart(tmp_path):
    source = tmp_path / "clean.parquet"
    clean_frame().write_parquet(source)
    chart = tmp_path / "chart.csv"
    pl.DataFrame(
        {
            "account": ["4000", "4930", "4210", "4970", "1800"],
            "title": ["Expenses", "Office supplies", "Rent", None, "Bank"],
            "group": [None, "4000", "4000", "4000", None],
        }
    ).write_csv(chart)
    config = ledger_config(
        tmp_path / "ledger.csv",
        classes=str(chart),
        chart_columns={"code": "account", "name": "title", "parent": "group"},
    )
    mapping = build_features(
        source,
        DataSpec.from_config(config),
        FeatureSettings.of(),
        tmp_path / "f.parquet",
        tmp_path / "m.json",
    )
    assert mapping.labels == ["4000", "4930", "4210", "4970", "1800"]
    assert mapping.counts == {"4000": 0, "4930": 2, "4210": 1, "4970": 1, "1800": 0}
    assert mapping.names == ["Expenses", "Office supplies", "Rent", None, "Bank"]
    assert mapping.descriptions == [None] * 5
    assert mapping.parents == [None, "4000", "4000", "4000", None]
    # The group takes no postings; the leaves (and the parentless bank account) do.
    assert mapping.postable == [False, True, True, True, True]


def test_class_names_from_labels_fill_what_the_chart_leaves_unnamed(tmp_path):
    frame = clean_frame().with_columns(
        pl.Series("account", ["AccountsPayableCurrent", "AOCIReclassifications", "Rent", "Rent"])
    )
    source = tmp_path / "clean.parquet"
    frame.write_parquet(source)
    chart = tmp_path / "chart.parquet"
    pl.DataFrame(
        {
            "code": ["AccountsPayableCurrent", "AOCIReclassifications", "Rent", "Taxes_Payable"],
            "name": [None, "Reclassifications out of AOCI", None, None],
        }
    ).write_parquet(chart)
    config = ledger_config(
        tmp_path / "ledger.csv",
        classes=str(chart),
        chart_columns={"name": "name"},
        class_names_from_labels=True,
    )
    mapping = build_features(
        source,
        DataSpec.from_config(config),
        FeatureSettings.of(),
        tmp_path / "f.parquet",
        tmp_path / "m.json",
    )
    assert mapping.names == [
        "Accounts Payable Current",
        "Reclassifications out of AOCI",
        "Rent",
        "Taxes Payable",
    ]


def test_the_bundled_default_names_its_classes_from_the_standard_tags(tmp_path):
    config = load_settings(str(REPO / "config" / "config.yaml"))
    spec = DataSpec.from_config(config)
    records, cleaned = tmp_path / "records.parquet", tmp_path / "clean.parquet"
    ingest(spec, records)
    clean(records, spec, cleaned, tmp_path / "rejects.parquet", CleanSettings.of(config["clean"]))
    options = FeatureSettings.of(config["features"])
    mapping = build_features(cleaned, spec, options, tmp_path / "f.parquet", tmp_path / "m.json")
    names = dict(zip(mapping.labels, mapping.names, strict=True))
    assert names["AccumulatedOtherComprehensiveIncome"] == "Accumulated Other Comprehensive Income"
    assert names["AOCIReclassifications"] == "AOCI Reclassifications"
    assert names["TradePayables"] == "Trade Payables"
    assert None not in names.values()
    assert mapping.parents == mapping.descriptions == [None] * len(names)


def test_a_warm_start_keeps_the_old_models_label_ids_and_numbers_new_classes_after(tmp_path):
    """The old model's classes keep their ids in its order, what the chart says of them follows
    them, a class the chart dropped stays (with the old map's name and no rows), new ones come
    after in chart order."""
    source = tmp_path / "clean.parquet"
    clean_frame().write_parquet(source)
    chart = tmp_path / "chart.csv"
    pl.DataFrame(
        {
            "account": ["1800", "4210", "4930", "4970", "6000"],
            "title": ["Bank", "Rent", "Office supplies", "Fees", "New"],
        }
    ).write_csv(chart)
    config = ledger_config(
        tmp_path / "ledger.csv",
        classes=str(chart),
        chart_columns={"code": "account", "name": "title"},
    )
    old_map = tmp_path / "old_label_map.json"
    old_map.write_text(
        json.dumps(
            {
                "label_column": "account",
                "labels": ["4930", "9999", "4210"],
                "counts": {"4930": 5, "9999": 1, "4210": 3},
                "names": ["Office", "Closed account", "Rent"],
                "descriptions": [None, "no longer used", None],
                "parents": [None, None, None],
            }
        )
    )
    mapping = build_features(
        source,
        DataSpec.from_config(config),
        FeatureSettings.of(),
        tmp_path / "f.parquet",
        tmp_path / "m.json",
        LabelMap.read(old_map),
    )
    assert mapping.labels == ["4930", "9999", "4210", "1800", "4970", "6000"]
    assert mapping.names == ["Office supplies", "Closed account", "Rent", "Bank", "Fees", "New"]
    assert mapping.descriptions[1] == "no longer used"
    assert mapping.counts == {"4930": 2, "9999": 0, "4210": 1, "1800": 0, "4970": 1, "6000": 0}
    # A label map from before `postable` existed: every account takes postings.
    assert mapping.postable == [True] * 6
