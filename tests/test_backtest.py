"""The backtest: the real workflow replayed over three monthly periods with a tiny BERT, reviewed
records flowing back as corrections and each period's training warm-started from the period
before's model."""

import datetime
import itertools
import json
import sys
import textwrap
from pathlib import Path

import backtest_thresholds
import polars as pl
import pytest
import yaml
from mlflow.tracking import MlflowClient
from sample_ledger import LEDGER_COLUMNS, ledger_config, ledger_row
from tiny_models import build_tiny_bert
from workflow_runner import jobs_run, snakemake

from account_tax.backtest.periods import (
    BacktestSettings,
    dated_records,
    period_labels,
    replayed_periods,
)
from account_tax.backtest.replay import (
    CANDIDATES,
    hindsight_auto_share,
    macro_f1_figures,
    period_config,
    posted_records,
    run_workflow,
    supported_target,
    write_records,
    wrong_posts_of_new_accounts,
)
from account_tax.data.clean import CleanSettings, clean
from account_tax.data.ingest import ingest
from account_tax.data.spec import DataSpec
from account_tax.data.split import TRAINED_ROWS
from account_tax.errors import DataError
from account_tax.settings import complete

pytestmark = pytest.mark.workflow

CORPUS = [
    "memo office supplies rent sales revenue bank fees no #",
    "vendor acme gmbh globex bankhaus amount +1e1 +1e2 month 1 2 3 4",
    *"0123456789|:#+",
] * 3
ACCOUNTS = {
    "4930": ("office supplies", "Acme GmbH"),
    "4210": ("rent", "Globex"),
    "1800": ("bank fees", "Bankhaus"),
    "4400": ("sales revenue", "Acme GmbH"),  # first booked in March
}


AMBIGUOUS = ("bank fees rent", "Globex")
"""Every fourth record of rent and of bank fees reads the same: no model can be sure of them."""


def dated_ledger(path: Path) -> int:
    """January (the history) with 20 rows of each of three accounts, then February to April
    with 8 of each, sales revenue from March on."""
    rows, n = [], 0
    for month, per_account in ((1, 20), (2, 8), (3, 8), (4, 8)):
        for account, (memo, vendor) in ACCOUNTS.items():
            if account == "4400" and month < 3:
                continue
            for i in range(per_account):
                n += 1
                if account in ("4210", "1800") and i % 4 == 0:
                    memo, vendor = AMBIGUOUS
                else:
                    memo, vendor = ACCOUNTS[account]
                rows.append(
                    ledger_row(
                        n,
                        date=f"2024-{month:02d}-{1 + i % 27:02d}",
                        vendor=vendor,
                        memo=f"{memo} no {n}",
                        amount=f"{10 + n}.00",
                        account=account,
                    )
                )
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_csv(path)
    return len(rows)


def test_periods_are_months_or_quarters_and_the_history_must_come_first():
    dates = pl.DataFrame({"d": pl.Series(["2024-01-31", "2024-04-01"]).str.to_date()})
    assert dates.select(period_labels(pl.col("d"), "month")).to_series().to_list() == [
        "2024-01",
        "2024-04",
    ]
    assert dates.select(period_labels(pl.col("d"), "quarter")).to_series().to_list() == [
        "2024-Q1",
        "2024-Q2",
    ]
    records = pl.DataFrame({"period": ["2024-01", "2024-02", "2024-03", "2024-02"]})
    assert replayed_periods(records, BacktestSettings.of(periods=2)) == ["2024-02", "2024-03"]
    with pytest.raises(DataError, match=r"backtest.periods is 3 but the data spans 3 month"):
        replayed_periods(records, BacktestSettings.of(periods=3))


def period_runs(workdir: Path) -> list[Path]:
    """The variant's workflow folders, one per period, in order."""
    return sorted(p for p in (workdir / "results/backtest/loop/runs").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def backtested(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("backtest")
    dated_ledger(workdir / "ledger.csv")
    # A chart file named relative to the workflow's folder, as a user writes it: each period's
    # run, in a folder of its own, still finds it.
    (workdir / "classes.txt").write_text("\n".join(ACCOUNTS) + "\n")
    config = ledger_config(workdir / "ledger.csv", classes="classes.txt")
    config["train"] = {
        "model": str(build_tiny_bert(workdir / "tiny-bert", CORPUS)),
        "max_length": 48,
        "epochs": 2,
        "per_device_batch_size": 8,
        "learning_rate": 0.01,
        "lora": {"r": 4, "alpha": 8},
        "warm_start": {"epochs": 1},
    }
    # A target that a few validation rows can show (4 right at 0.5), so that periods post.
    config["review"] = {"target_precision": 0.8, "confidence_level": 0.5}
    config["evaluate"] = {"bootstrap_resamples": 100}
    config["upload"] = {"enabled": False}
    config["backtest"] = {
        "periods": 3,
        "variants": {"loop": {"corrections": True, "warm_start": True}},
    }
    result = snakemake(workdir, "backtest", config=config)
    return workdir, result


def test_every_period_is_predicted_and_every_record_posted_or_reviewed(backtested):
    workdir, result = backtested
    assert jobs_run(result) == {
        "backtest": 1,
        "backtest_variant": 1,
        "ingest": 1,
        "clean": 1,
    }
    table = pl.read_csv(workdir / "results/backtest/periods.tsv", separator="\t")
    assert table["variant"].to_list() == ["loop"] * 3
    assert table["period"].to_list() == ["2024-02", "2024-03", "2024-04"]
    assert table["rows"].to_list() == [24, 32, 32]
    assert (table["auto_rows"] + table["review_rows"]).to_list() == table["rows"].to_list()
    # The novelty rule only holds back novel records, which go to review.
    assert (table["novel_held_back_right"] <= table["novel_held_back"]).all()
    assert (table["novel_held_back"] <= table["novel_rows"]).all()
    assert (table["novel_rows"] <= table["review_rows"]).all()
    # Sales revenue is new in March: an account the ledger had not seen. In April it is new
    # again unless a March record reached the ledger with it (posted or reviewed).
    runs = period_runs(workdir)
    april = pl.read_csv(runs[2] / "ledger.csv", schema_overrides={"account": pl.String})
    reviewed = pl.read_parquet(runs[1] / "results/predict/period.review.parquet")
    known = "4400" in {*april["account"], *reviewed["account"]}
    assert table["new_accounts"].to_list() == [0, 1, 0 if known else 1]
    for run, row in zip(runs, table.iter_rows(named=True), strict=True):
        predicted = pl.read_parquet(run / "results/predict/period.parquet")
        assert row["auto_rows"] == (predicted["decision"] == "auto").sum()
        assert row["rule_auto_rows"] == (predicted["decision_reason"] == "ledger_rule").sum()
    wrong = table["auto_rows"] - (table["auto_rows"] * table["posted_precision"].fill_null(0))
    assert (table["posted_wrong_new_accounts"] <= wrong.round()).all()
    # Where the fitted threshold kept the target (0.8), the best threshold in hindsight posts at
    # least as much; it never posts a novel record.
    kept = table["posted_precision"].fill_null(1) >= 0.8
    assert (table.filter(kept)["hindsight_auto_share"] >= table.filter(kept)["auto_share"]).all()
    posted_at_best = table["hindsight_auto_share"] * table["rows"]
    assert (posted_at_best.round() <= table["rows"] - table["novel_rows"]).all()
    # The workflow's MLflow run has each period's figures.
    run = json.loads((workdir / "results/tracking/run.json").read_text())
    metrics = MlflowClient(tracking_uri=run["tracking_uri"]).get_run(run["run_id"]).data.metrics
    for row in table.iter_rows(named=True):
        for name in ("auto_share", "hindsight_auto_share", "review_rows"):
            assert metrics[f"backtest/loop/{row['period']}/{name}"] == pytest.approx(row[name])
    # Some records are posted; the ambiguous ones cannot all clear the threshold: some are left
    # to people.
    assert table["auto_rows"].sum() > 0
    assert table["review_rows"].sum() > 0
    for model in ("model", "baseline"):
        assert (table[f"{model}_macro_f1_low"] <= table[f"{model}_macro_f1"]).all()
        assert (table[f"{model}_macro_f1"] <= table[f"{model}_macro_f1_high"]).all()
    # Each candidate scored as if it had shipped: the one that did decides as predict did.
    column = {"fine-tuned": "model", "baseline": "baseline", "ensemble": "ensemble"}
    for row in table.iter_rows(named=True):
        shipped = column[row["shipped"]]
        assert row[f"{shipped}_auto_share"] == pytest.approx(row["auto_share"])
        precision = row["posted_precision"]
        assert row[f"{shipped}_posted_precision"] == (precision and pytest.approx(precision))
    assert (table["train_cpu_minutes"] > 0).all()
    assert (table["train_cpu_minutes"] < table["cpu_minutes"]).all()
    assert (workdir / "results/backtest/backtest.png").stat().st_size > 10_000


def test_reviewed_records_come_back_as_corrections_with_the_account_a_person_chose(backtested):
    workdir, _ = backtested
    runs = period_runs(workdir)
    table = pl.read_csv(workdir / "results/backtest/loop/periods.tsv", separator="\t")
    truth = pl.read_csv(workdir / "ledger.csv", schema_overrides={"account": pl.String})
    for index in (1, 2):
        # Every row of the earlier periods' review files is used: they are records the ledger
        # lacks, so each joins it, with the true account.
        earlier = table["review_rows"][:index].sum()
        counts = json.loads((runs[index] / "results/correct/counts.json").read_text())
        assert counts["added"] == earlier and counts["rejected"] == 0 and counts["applied"] == 0
        assert counts["rows_in"] == counts["applied"] + counts["added"] + counts["rejected"]
        corrected = pl.read_parquet(runs[index] / "results/correct/records.parquet").filter(
            pl.col("label_source") == "correction"
        )
        assert corrected.height == earlier
        joined = corrected.join(truth, on="entry_id", suffix="_true")
        assert joined.height == earlier
        assert (joined["account"] == joined["account_true"].str.strip_chars()).all()
        # Each of them says what was suggested: the track record, whose non-novel rows the
        # period's threshold rests on with validation.
        record = pl.read_parquet(runs[index] / "results/correct/track_record.parquet")
        assert record.height == counts["track_record"] == earlier
        shown = pl.concat(
            pl.read_parquet(run / "results/predict/period.review.parquet") for run in runs[:index]
        ).join(record, on="id", suffix="_reviewed")
        assert shown.height == earlier
        assert (shown["right"] == (shown["predicted_label"] == shown["account"])).all()
        assert (shown["novel"] == shown["novel_reviewed"]).all()
        # Less the records drawn into this period's validation or test split.
        scored = pl.concat(
            pl.read_parquet(runs[index] / f"results/serialize/{name}.parquet", columns=["id"])
            for name in ("validation", "test")
        )["id"]
        weighed = table["track_record_rows"][index]
        assert weighed == record.filter(~pl.col("novel") & ~pl.col("id").is_in(scored)).height
        evaluation = json.loads((runs[index] / "results/evaluate/metrics.json").read_text())
        assert evaluation["review"]["track_record"]["rows"] == weighed
        summary = (runs[index] / "results/evaluate/summary.html").read_text()
        shown_in_summary = f"{weighed} reviewed suggestions, weighed with validation" in summary
        assert shown_in_summary == (weighed > 0)
        # The highest target those rows support: a threshold exactly where it reaches the
        # target, and shown beside the threshold.
        shipped = evaluation["comparison"]["shipped"]["candidate"]
        review = evaluation[shipped]["review"] if shipped != "fine-tuned" else evaluation["review"]
        supported = review["highest_supported_target"]
        assert table["supported_target"][index] == supported["target_precision"]
        reaches = supported["target_precision"] >= review["target_precision"]
        assert (review["threshold"] is not None) == reaches
        best = f"{supported['target_precision']:.3f}, posting {supported['coverage']:.3f}"
        assert best in summary
        # Posted records are in the period's ledger with the account that was suggested.
        posted = pl.read_parquet(runs[index - 1] / "results/predict/period.parquet").filter(
            pl.col("decision") == "auto"
        )
        ledger = pl.read_csv(runs[index] / "ledger.csv", schema_overrides={"account": pl.String})
        booked = posted.join(ledger, left_on="id", right_on="entry_id")
        assert booked.height == posted.height
        assert (booked["predicted_label"] == booked["account_right"]).all()
    # Some period's threshold rested on reviewed suggestions.
    assert table["track_record_rows"].sum() > 0


MODEL_DIR = "results/train/segment-1/model"


def test_each_period_starts_from_the_period_befores_model(backtested):
    workdir, _ = backtested
    runs = period_runs(workdir)
    first = json.loads((runs[0] / "results/train/segment-1/model/training_info.json").read_text())
    assert first["head_init"]["method"] != "warm_start"
    for earlier, later in itertools.pairwise(runs):
        info = json.loads((later / "results/train/segment-1/model/training_info.json").read_text())
        assert info["head_init"]["method"] == "warm_start"
        assert info["head_init"]["from"] == str(earlier / "results/train/segment-1/model")
        assert info["settings"]["epochs"] == 1
        # The records the model it continues has learned are neither validation nor test rows.
        learned = set(pl.read_parquet(earlier / MODEL_DIR / TRAINED_ROWS)["id"].to_list())
        held_out = pl.concat(
            pl.read_parquet(later / f"results/split/{name}.parquet")
            for name in ("validation", "test")
        )
        assert held_out.height > 0 and not learned & set(held_out["entry_id"].to_list())
        report = json.loads((later / "results/split/split_report.json").read_text())
        assert report["learned_rows"] == len(learned)


def test_re_deciding_a_period_at_its_own_settings_posts_what_it_posted(backtested):
    """bench/backtest_thresholds.py, which bench/README's figures for other levels and novelty
    quantiles rest on, re-scores each period's validation split and reproduces the decisions
    the period's own run made; a higher novelty quantile never posts more."""
    workdir, _ = backtested
    posted = 0
    for run in period_runs(workdir):
        review = yaml.safe_load((run / "config.yaml").read_text("utf-8"))["review"]
        level, quantile = review["confidence_level"], review["novelty_quantile"]
        row = backtest_thresholds.period_rows(run, [level], [quantile, 0.5])
        for rule in (str(level), f"q{quantile}"):
            assert row[f"{rule}_posted"] == row["shipped_posted"], (run.name, rule)
            assert row[f"{rule}_right"] == row["shipped_right"], (run.name, rule)
            wrong = row[f"{rule}_posted"] - row[f"{rule}_right"]
            assert 0 <= row[f"{rule}_wrong_never_booked"] <= wrong
        assert row["q0.5_posted"] <= row["shipped_posted"]
        posted += row["shipped_posted"]
    assert posted > 0


def test_the_supported_target_is_the_shipped_candidates():
    """Where the baseline ships, the period's supported target is what its validation rows
    supported, not the fine-tuned model's (the top level of metrics.json)."""

    def report(target: float) -> dict:
        return {"review": {"highest_supported_target": {"target_precision": target}}}

    evaluation = {
        **report(0.5),
        "baseline": report(0.99),
        "ensemble": report(0.7),
        "comparison": {"shipped": {"candidate": "baseline"}},
    }
    assert supported_target(evaluation) == 0.99
    evaluation["comparison"]["shipped"]["candidate"] = "fine-tuned"
    assert supported_target(evaluation) == 0.5
    # A period whose validation split is empty, with no track record: no rows to support one.
    evaluation["review"]["highest_supported_target"] = None
    assert supported_target(evaluation) is None


def test_a_period_with_an_empty_test_split_has_no_macro_f1():
    """Evaluate gives no intervals where the test split is empty: the period's figures say so,
    where the backtest failed after the period's whole run."""
    interval = {"macro_f1": {"value": 0.8, "low": 0.7, "high": 0.9}}
    tested = {"comparison": {"bootstrap": {"models": dict.fromkeys(CANDIDATES.values(), interval)}}}
    figures = macro_f1_figures(tested)
    assert figures["model_macro_f1"] == 0.8 and figures["ensemble_macro_f1_high"] == 0.9
    assert macro_f1_figures({"comparison": {"verdict": None}}) == dict.fromkeys(figures)


def test_a_typed_ledgers_period_files_read_back_as_its_records(tmp_path):
    """A Parquet ledger's dates and numbers are typed; the period's CSV ledger is read with the
    config's date and number formats, so it holds them written in those formats, and ingest and
    clean give the records back. A model named by a relative path is found from the period's
    own folder."""
    records = pl.DataFrame(
        {
            "entry_id": ["E1", "E2"],
            "date": [datetime.datetime(2024, 3, 15, 10, 30), datetime.datetime(2024, 12, 1)],
            "vendor": ["Acme GmbH", "Globex"],
            "memo": ["office chairs", "rent"],
            "amount": [1234.5, -17.25],
            "account": ["4930", "4210"],
        }
    )
    ledger = tmp_path / "ledger.parquet"
    records.write_parquet(ledger)
    config = ledger_config(ledger, date_format="%d.%m.%Y", number_format="1.234,5")
    config["train"] = {"model": "models/mine"}
    config = complete(config, whole=True)
    spec = DataSpec.from_config(config)
    ingest(spec, tmp_path / "ingested.parquet")
    write_records(pl.read_parquet(tmp_path / "ingested.parquet"), spec, tmp_path / "p/ledger.csv")
    period = period_config(config, tmp_path / "p/ledger.csv", tmp_path / "p/new.csv", [], None)
    period_spec = DataSpec.from_config(period)
    ingest(period_spec, tmp_path / "p/ingested.parquet")
    counts = clean(
        tmp_path / "p/ingested.parquet",
        period_spec,
        tmp_path / "p/clean.parquet",
        tmp_path / "p/rejects.parquet",
        CleanSettings.of(period["clean"]),
    )
    assert counts.rows_out == 2, pl.read_parquet(tmp_path / "p/rejects.parquet")["reason"]
    read_back = pl.read_parquet(tmp_path / "p/clean.parquet")
    assert read_back["date"].to_list() == [datetime.date(2024, 3, 15), datetime.date(2024, 12, 1)]
    assert read_back["amount"].to_list() == [1234.5, -17.25]
    assert period["train"]["model"] == str(Path("models/mine").resolve())
    assert period_config(complete(ledger_config(ledger), whole=True), ledger, ledger, [], None)[
        "train"
    ]["model"].startswith("pkg:")


def test_posted_records_join_the_ledger_by_their_row_whatever_their_id_looks_like():
    """The period's posted records go into the next period's ledger with the suggested account:
    found by their row in new.csv, so an id clean trimmed or one that two records share is
    neither lost nor doubled."""
    new = pl.DataFrame(
        {
            "source_row": [7, 8, 9],
            "entry_id": ["INV-1 ", "INV-2", "INV-2"],
            "account": ["4930", "4210", "1800"],
        }
    )
    predictions = pl.DataFrame(
        {
            "source_row": [1, 2, 3],
            "id": ["INV-1", "INV-2", "INV-2"],
            "predicted_label": ["4930", "4400", "4210"],
            "decision": ["auto", "review", "auto"],
        }
    )
    booked = posted_records(new, predictions, "account")
    assert booked.rows() == [(7, "INV-1 ", "4930"), (9, "INV-2", "4210")]


def test_wrong_posts_of_accounts_new_in_the_period_are_counted():
    predictions = pl.DataFrame(
        {
            "account": ["4400", "4400", "4400", "4930", "4930"],
            "predicted_label": ["4930", "4400", "4930", "4210", "4930"],
            "decision": ["auto", "auto", "review", "auto", "auto"],
        }
    )
    # Posted wrong, of an account the model never saw: the first row only. The second was
    # right (through the account's name), the third went to review, the fourth's account was
    # seen.
    assert wrong_posts_of_new_accounts(predictions, "account", {"4930", "4210"}) == 1
    assert wrong_posts_of_new_accounts(predictions, "account", {"4400", "4930", "4210"}) == 0


def test_the_best_threshold_in_hindsight_posts_the_most_at_the_target_precision():
    predictions = pl.DataFrame(
        {
            "account": ["a", "a", "b", "a", "a", "a"],
            "predicted_label": ["a", "a", "a", "a", "a", "b"],
            "confidence": [0.9, 0.8, 0.7, 0.6, 0.5, 0.5],
            "novel": [False] * 6,
        }
    )
    # Right, right, wrong, right, then a tie of a right and a wrong one.
    assert hindsight_auto_share(predictions, "account", 0.98) == pytest.approx(2 / 6)
    assert hindsight_auto_share(predictions, "account", 0.75) == pytest.approx(4 / 6)
    # A threshold takes a tie whole: at 0.5 both rows (4 right of 6).
    assert hindsight_auto_share(predictions, "account", 0.6) == 1
    # A novel record is never posted: without the wrong third one, the first three are right
    # (then the tie holds a wrong one).
    novel = predictions.with_columns(novel=pl.Series([False, False, True, False, False, False]))
    assert hindsight_auto_share(novel, "account", 0.98) == pytest.approx(3 / 6)
    assert hindsight_auto_share(novel.with_columns(novel=True), "account", 0.98) == 0
    # 49 of 50 right is 0.98.
    fifty = pl.DataFrame(
        {
            "account": ["a"] * 50,
            "predicted_label": ["a"] * 49 + ["b"],
            "confidence": [1.0 - i / 100 for i in range(50)],
            "novel": [False] * 50,
        }
    )
    assert hindsight_auto_share(fifty, "account", 0.98) == 1
    assert (
        hindsight_auto_share(fifty.with_columns(predicted_label=pl.lit("b")), "account", 0.98) == 0
    )


def records_files(tmp_path: Path, dates: list[str | None]) -> tuple[Path, Path]:
    """Ingest's and clean's outputs for records with these dates."""
    rows = [ledger_row(n, date=d or "") for n, d in enumerate(dates)]
    raw = pl.DataFrame(rows).with_columns(source_row=pl.int_range(1, len(rows) + 1))
    labelled = raw.with_columns(pl.col("date").str.to_date(strict=False))
    raw.write_parquet(tmp_path / "raw.parquet")
    labelled.write_parquet(tmp_path / "labelled.parquet")
    return tmp_path / "raw.parquet", tmp_path / "labelled.parquet"


def test_records_are_placed_in_periods_by_their_date(tmp_path):
    raw, labelled = records_files(tmp_path, ["2024-01-05", "2024-03-01", "2024-01-31"])
    spec = DataSpec.from_config(ledger_config(tmp_path / "x.csv"))
    records = dated_records(raw, labelled, spec, BacktestSettings.of())
    assert records["period"].to_list() == ["2024-01", "2024-03", "2024-01"]
    assert records["entry_id"].to_list() == ["E00000", "E00001", "E00002"]


def test_a_record_that_corrections_added_is_named_and_not_replayed(tmp_path, caplog):
    """The ledger file's records are replayed as read; one that data.corrections added (numbered
    after the file's rows) has no row as read, and the log says it is left out."""
    raw, labelled = records_files(tmp_path, ["2024-01-05", "2024-03-01", "2024-01-31"])
    frame = pl.read_parquet(labelled)
    added = frame.tail(1).with_columns(source_row=pl.lit(4, pl.Int64), entry_id=pl.lit("C00001"))
    pl.concat([frame, added]).write_parquet(labelled)
    spec = DataSpec.from_config(ledger_config(tmp_path / "x.csv"))
    records = dated_records(raw, labelled, spec, BacktestSettings.of())
    assert records["entry_id"].to_list() == ["E00000", "E00001", "E00002"]
    assert "the 1 record(s) that data.corrections added to the ledger are not replayed" in (
        caplog.text
    )


def test_a_backtest_needs_a_date_on_every_record_and_an_id(tmp_path):
    raw, labelled = records_files(tmp_path, ["2024-01-05", None, None])
    spec = DataSpec.from_config(ledger_config(tmp_path / "x.csv"))
    with pytest.raises(DataError, match=r"labelled.parquet: 2 record\(s\) without a 'date'"):
        dated_records(raw, labelled, spec, BacktestSettings.of())
    columns = {k: v for k, v in LEDGER_COLUMNS.items() if k != "id"}
    without_id = DataSpec.from_config(ledger_config(tmp_path / "x.csv", columns=columns))
    with pytest.raises(DataError, match=r"no id column \(data.columns.id\)"):
        dated_records(raw, labelled, without_id, BacktestSettings.of())
    columns = {k: v for k, v in LEDGER_COLUMNS.items() if k != "date"}
    undated = DataSpec.from_config(ledger_config(tmp_path / "x.csv", columns=columns))
    with pytest.raises(DataError, match=r"no date column \(data.columns.date\)"):
        dated_records(raw, labelled, undated, BacktestSettings.of())
    with pytest.raises(DataError, match=r"`backtest.date_column`: 'memo' is not among the data's"):
        dated_records(raw, labelled, spec, BacktestSettings.of(date_column="memo"))


def test_every_periods_run_uses_the_projects_compiled_extensions(tmp_path, monkeypatch):
    """Each period runs in a folder of its own; DeepSpeed's module must not be compiled again
    there (some 75 CPU seconds a period)."""
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(
        textwrap.dedent(
            """
            rule period:
                output:
                    "results/evaluate/metrics.json",
                    "results/predict/period.parquet",
                shell:
                    "for f in {output}; do echo $TORCH_EXTENSIONS_DIR > $f; done"
            """
        )
    )
    for period in ("01-2024-03", "02-2024-04"):
        workdir = tmp_path / "runs" / period
        workdir.mkdir(parents=True)
        run_workflow(snakefile, workdir, {}, cores=1)
        extensions = (workdir / "results/evaluate/metrics.json").read_text().strip()
        assert extensions == str(tmp_path / ".cache" / "torch_extensions")


def test_a_periods_cpu_time_counts_a_job_whole(tmp_path):
    """A period's CPU time is what the kernel counted for Snakemake and every job, a process that
    burned CPU and ended before its job did included: Snakemake's benchmark samples a job's
    processes while they run and misses such a process, and most of a short job."""
    burn = tmp_path / "burn.py"
    burn.write_text("import time\nwhile time.process_time() < 2:\n    pass\n")
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(
        textwrap.dedent(
            f"""
            rule period:
                output:
                    "results/evaluate/metrics.json",
                    "results/predict/period.parquet",
                shell:
                    "{sys.executable} {burn} && sleep 1 && touch {{output}}"
            """
        )
    )
    workdir = tmp_path / "runs" / "01-2024-03"
    workdir.mkdir(parents=True)
    spent = run_workflow(snakefile, workdir, {}, cores=1)
    assert spent.cpu_seconds >= 2
    assert spent.wall_seconds >= 3
