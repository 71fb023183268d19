"""The synthetic ledger generator: deterministic, shaped like the real use case, and its dirty
rows are exactly the ones the clean stage rejects or drops."""

from datetime import date
from pathlib import Path

import jsonschema
import numpy as np
import polars as pl
import pytest
import synthetic_ledger as synthetic
import yaml
from synthetic_ledger import COLUMNS, DIRTY_KINDS, class_codes, class_counts, generate_ledger

from account_tax.backtest.periods import BacktestSettings
from account_tax.data.clean import REASON, CleanSettings, clean
from account_tax.data.ingest import ingest
from account_tax.data.spec import DataSpec
from account_tax.settings import SCHEMA_PATH

REPO = Path(__file__).resolve().parents[1]
SYNTHETIC_CONFIG = REPO / "config" / "synthetic_ledger.yaml"

# How clean names each kind of dirty row in its rejects file.
REJECT_REASONS = {
    "bad_amount": "unparseable number (format 1234.5) in column 'amount'",
    "bad_date": "unparseable date",
    "missing_label": "missing label in column 'account'",
    "unknown_label": "unknown class",
    "invalid_utf8": "invalid UTF-8 in column 'memo'",
}


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 700 rows, so a few thousand rows already cross chunk boundaries."""
    monkeypatch.setattr(synthetic, "CHUNK_ROWS", 700)


def read(path: Path) -> pl.DataFrame:
    if path.suffix == ".csv":
        return pl.read_csv(path, infer_schema=False)
    return pl.read_parquet(path)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_same_seed_and_rows_give_identical_bytes(tmp_path, small_chunks, suffix):
    first = generate_ledger(tmp_path / f"a{suffix}", 2500, seed=4, dirty_fraction=0.1)
    second = generate_ledger(tmp_path / f"b{suffix}", 2500, seed=4, dirty_fraction=0.1)
    other_seed = generate_ledger(tmp_path / f"c{suffix}", 2500, seed=5, dirty_fraction=0.1)
    assert first.dirty == second.dirty
    assert Path(first.output).read_bytes() == Path(second.output).read_bytes()
    assert Path(first.output).read_bytes() != Path(other_seed.output).read_bytes()


@pytest.mark.parametrize("rows", [1, 699, 2101])
def test_row_count_columns_and_unique_ids(tmp_path, small_chunks, rows):
    summary = generate_ledger(tmp_path / "ledger.csv", rows, seed=1)
    frame = read(Path(summary.output))
    assert frame.columns == list(COLUMNS)
    assert frame.height == rows == summary.rows
    assert frame.get_column("entry_id").n_unique() == rows


def test_values_are_well_formed(tmp_path):
    frame = read(Path(generate_ledger(tmp_path / "ledger.parquet", 20_000, seed=2).output))
    assert frame.null_count().sum_horizontal().item() == 0
    amount = frame.get_column("amount")
    assert amount.str.contains(r"^-?\d+\.\d{2}$").all()
    negative = frame.filter(pl.col("amount").str.starts_with("-"))
    assert 0 < negative.height < 0.05 * frame.height
    assert (negative.get_column("document_type") == "credit_note").all()
    dates = frame.get_column("date").str.to_date("%Y-%m-%d", strict=False)
    assert dates.null_count() == 0
    assert dates.min() >= synthetic.FIRST_DAY.item() and dates.max() <= synthetic.LAST_DAY.item()
    currency_share = frame.get_column("currency").value_counts(normalize=True, name="share")
    shares = dict(currency_share.iter_rows())
    assert set(shares) == set(synthetic.CURRENCIES)
    assert shares["EUR"] > 0.9


def test_class_file_lists_every_account_including_those_without_rows(tmp_path):
    summary = generate_ledger(tmp_path / "ledger.csv", 20_000, seed=3)
    classes = Path(summary.classes_output).read_text(encoding="utf-8").splitlines()
    assert Path(summary.classes_output) == tmp_path / "classes.txt"
    assert classes == class_codes() == sorted(classes)
    assert 260 <= len(classes) <= 300 and len(set(classes)) == len(classes)
    assert all(len(code) == 4 and code.isdigit() for code in classes)

    seen = set(read(Path(summary.output)).get_column("account"))
    without_rows = set(classes) - seen
    assert seen <= set(classes)
    assert 15 <= len(without_rows) <= 25
    assert summary.classes_without_rows == len(without_rows)


def test_class_sizes_follow_a_zipf_like_imbalance():
    counts = class_counts(1_000_000)
    booked = np.sort(counts[counts > 0])[::-1]
    assert counts.sum() == 1_000_000
    assert booked[0] / booked[-1] > 1000  # the largest class thousands of times the smallest
    assert 0.1 < booked[0] / counts.sum() < 0.4
    assert booked[: len(booked) // 10].sum() > 0.6 * counts.sum()  # a heavy head ...
    assert (booked > 100).sum() > len(booked) // 2  # ... and a long tail of small classes
    # Zipf: log size falls about linearly in log rank (no cliff, no plateau).
    slope = np.polyfit(np.log(np.arange(1, len(booked) + 1) + 2), np.log(booked), 1)[0]
    assert -2.2 < slope < -1.4


def test_file_has_exactly_the_planned_class_sizes(tmp_path, small_chunks):
    frame = read(Path(generate_ledger(tmp_path / "ledger.parquet", 5000, seed=6).output))
    sizes = dict(frame.group_by("account").len().iter_rows())
    planned = dict(zip(class_codes(), class_counts(5000).tolist(), strict=True))
    assert sizes == {code: n for code, n in planned.items() if n}


def test_memo_predicts_the_account_but_not_trivially(tmp_path):
    """Majority vote of the purest memo token: well above the majority class, below perfect."""
    frame = read(Path(generate_ledger(tmp_path / "ledger.parquet", 30_000, seed=7).output))
    tokens = (
        frame.with_row_index("row")
        .select(
            "row",
            "account",
            pl.col("memo").str.to_lowercase().str.replace_all(r"\d+", "#").str.split(" "),
        )
        .explode("memo")
    )
    train, test = tokens.filter(pl.col("row") < 20_000), tokens.filter(pl.col("row") >= 20_000)
    token_stats = (
        train.group_by("memo", "account")
        .len()
        .sort("len", "account", descending=True)
        .group_by("memo", maintain_order=True)
        .agg(
            pl.col("account").first().alias("guess"),
            (pl.col("len").first() / pl.col("len").sum()).alias("purity"),
        )
    )
    predicted = (
        test.join(token_stats, on="memo")
        .sort("row", "purity", descending=[False, True])
        .group_by("row", maintain_order=True)
        .agg(pl.col("guess").first(), pl.col("account").first())
    )
    accuracy = (predicted.get_column("guess") == predicted.get_column("account")).mean()
    majority = frame.get_column("account").value_counts(normalize=True)["proportion"].max()
    assert majority < 0.3
    assert 0.7 < accuracy < 0.98


def synthetic_spec(ledger: Path, classes: Path) -> DataSpec:
    config = yaml.safe_load(SYNTHETIC_CONFIG.read_text(encoding="utf-8"))
    config["data"]["path"] = str(ledger)
    config["data"]["classes"] = str(classes)
    return DataSpec.from_config(config)


@pytest.mark.parametrize(
    ("suffix", "fraction"), [(".csv", 0.0), (".csv", 0.12), (".parquet", 0.12)]
)
def test_clean_stage_catches_every_dirty_row_by_kind(tmp_path, small_chunks, suffix, fraction):
    rows = 3000
    summary = generate_ledger(tmp_path / f"ledger{suffix}", rows, seed=8, dirty_fraction=fraction)
    kinds = [k for k in DIRTY_KINDS if suffix == ".csv" or k not in synthetic.CSV_ONLY_KINDS]
    assert sum(summary.dirty.values()) == int(fraction * rows)
    for kind in DIRTY_KINDS:
        expected = int(fraction * rows) // len(kinds) if kind in kinds else 0
        assert summary.dirty[kind] in (expected, expected + 1)

    spec = synthetic_spec(Path(summary.output), Path(summary.classes_output))
    assert ingest(spec, tmp_path / "records.parquet") == rows
    counts = clean(
        tmp_path / "records.parquet",
        spec,
        tmp_path / "clean.parquet",
        tmp_path / "rejects.parquet",
        CleanSettings.of(),
    )
    reasons = pl.read_parquet(tmp_path / "rejects.parquet").get_column(REASON)
    for kind, reason in REJECT_REASONS.items():
        assert reasons.str.contains(reason, literal=True).sum() == summary.dirty[kind], kind
    assert counts.rejected == sum(summary.dirty[k] for k in REJECT_REASONS)
    assert counts.duplicates == summary.dirty["duplicate"]
    assert counts.rows_out == rows - sum(summary.dirty.values())


def test_arguments_out_of_range_are_refused(tmp_path):
    with pytest.raises(ValueError, match="rows"):
        generate_ledger(tmp_path / "ledger.csv", 0)
    with pytest.raises(ValueError, match="dirty fraction"):
        generate_ledger(tmp_path / "ledger.csv", 10, dirty_fraction=0.6)
    with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
        generate_ledger(tmp_path / "ledger.json", 10)
    assert not list(tmp_path.iterdir())


def test_example_config_is_valid_and_names_the_generated_columns():
    schema = yaml.safe_load((SCHEMA_PATH).read_text())
    config = yaml.safe_load(SYNTHETIC_CONFIG.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(config)
    spec = DataSpec.from_config(config | {"data": config["data"] | {"classes": None}})
    assert sorted(spec.columns) == sorted(COLUMNS)
    assert config["data"]["classes"] == str(Path(config["data"]["path"]).parent / "classes.txt")


def test_a_drifting_ledger_opens_accounts_renames_vendors_and_inflates(tmp_path):
    plain = read(Path(generate_ledger(tmp_path / "plain.csv", 30_000, seed=2).output))
    summary = generate_ledger(tmp_path / "drift.csv", 30_000, seed=2, drifting=True)
    drifting = read(Path(summary.output)).with_columns(
        pl.col("date").str.to_date(), pl.col("amount").cast(pl.Float64)
    )
    plain = plain.with_columns(pl.col("date").str.to_date(), pl.col("amount").cast(pl.Float64))
    assert summary.drift["opened_accounts"] > 20 and summary.drift["renamed_vendors"] > 40
    # The same rows, moved, renamed and scaled: the accounts and entry ids are untouched.
    assert drifting.select("entry_id", "account").equals(plain.select("entry_id", "account"))
    drift = synthetic.drift()
    codes = synthetic.chart().codes.to_list()

    # No booking before an account's opening day: accounts of ten rows or more whose first one
    # comes 18 months after the ledger's, which plain sampling rarely gives (year-end accounts).
    opening = pl.DataFrame({"account": codes, "opening": drift.opening_day.astype("datetime64[D]")})
    joined = drifting.join(opening, on="account")
    assert (joined["date"] >= joined["opening"]).all()

    def opened_late(frame):
        first = frame.group_by("account").agg(pl.len(), pl.col("date").min())
        return first.filter((pl.col("len") >= 10) & (pl.col("date") >= date(2022, 7, 1))).height

    assert opened_late(drifting) >= 8 and opened_late(plain) <= 2

    # A renamed vendor's old name before its day, the new one from then on, never before.
    vendors = synthetic.chart().vendors.to_list()
    lower = pl.col("vendor").str.to_lowercase()
    rows = dict(plain.group_by(lower).len().iter_rows())
    renamed = np.flatnonzero(drift.rename_day < np.datetime64("2024-01-01"))
    index = int(max(renamed, key=lambda i: rows.get(vendors[i].lower(), 0)))
    old, new, day = vendors[index], drift.renamed[index], drift.rename_day[index]
    before = drifting.filter(lower == old.lower())["date"]
    after = drifting.filter(lower == new.lower())["date"]
    assert before.len() and after.len()
    assert before.max() < day <= after.min()

    # Prices rise about 6 % a year: the median amount of the same rows, 2024 over 2021.
    def median_ratio(frame):
        yearly = frame.group_by(pl.col("date").dt.year()).agg(pl.col("amount").abs().median())
        by_year = dict(yearly.iter_rows())
        return by_year[2024] / by_year[2021]

    assert 1.08 < median_ratio(drifting) / median_ratio(plain) < 1.35


def test_the_backtest_config_is_valid_over_the_synthetic_one():
    """config/backtest.yaml, merged over the synthetic ledger's as its header says."""
    schema = yaml.safe_load((SCHEMA_PATH).read_text())
    config = yaml.safe_load(SYNTHETIC_CONFIG.read_text(encoding="utf-8"))
    backtest = yaml.safe_load((REPO / "config" / "backtest.yaml").read_text(encoding="utf-8"))
    merged = config | {name: config.get(name, {}) | section for name, section in backtest.items()}
    jsonschema.Draft202012Validator(schema).validate(merged)
    variants = BacktestSettings.of(merged["backtest"]).variants
    assert variants == {
        "loop": {"corrections": True, "warm_start": False},
        "no_feedback": {"corrections": False, "warm_start": False},
        "warm": {"corrections": True, "warm_start": True},
    }


def test_a_csv_class_file_is_a_chart_with_the_account_names(tmp_path):
    summary = generate_ledger(tmp_path / "ledger.csv", 500, classes_output=tmp_path / "chart.csv")
    chart = pl.read_csv(summary.classes_output, infer_schema=False)
    assert chart.columns == ["code", "name"]
    assert chart["code"].to_list() == class_codes()
    names = dict(zip(chart["code"], chart["name"], strict=True))
    assert names["0120"] == "Patents" and chart["name"].is_not_null().all()


def test_the_few_rows_config_names_the_chart_over_the_synthetic_one(tmp_path, monkeypatch):
    """config/synthetic_few_rows.yaml over config/synthetic_ledger.yaml, as its command gives it:
    the chart with names, the rest of the synthetic data section kept."""
    generate_ledger(
        tmp_path / "results/synthetic/ledger.csv",
        3000,
        classes_output=tmp_path / "results/synthetic/chart.csv",
    )
    monkeypatch.chdir(tmp_path)
    base = yaml.safe_load(SYNTHETIC_CONFIG.read_text(encoding="utf-8"))
    overlay = yaml.safe_load((REPO / "config/synthetic_few_rows.yaml").read_text(encoding="utf-8"))
    data = base["data"] | overlay["data"]
    spec = DataSpec.from_config({"data": data})
    assert list(spec.chart.codes) == class_codes()
    assert all(spec.chart.names)
    counts = read(tmp_path / "results/synthetic/ledger.csv").group_by("account").len()["len"]
    assert counts.median() <= 3
