import json
import runpy
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import joblib
import numpy as np
import polars as pl
import pytest

from account_tax.errors import DataError
from account_tax.evaluation.baseline import (
    BaselinePaths,
    BaselineSettings,
    baseline_logits,
    build_pipeline,
    predict_probabilities,
    train_baseline,
)
from account_tax.evaluation.evidence import baseline_features, weighing_ngrams
from account_tax.evaluation.metrics import top_k
from account_tax.evaluation.tables import (
    PREDICTED_LABEL_ID,
    TOP_K_LABEL_IDS,
    TOP_K_PROBABILITIES,
)
from account_tax.training.evidence import EvidenceIndex
from account_tax.training.temperature import softmax

REPO = Path(__file__).resolve().parents[1]

# Label ids are positions in this list; "legal fees" has no sample at all.
ACCOUNTS = {
    "legal fees": ([], []),
    "office supplies": (
        ["paper", "toner", "pens", "stapler", "folders", "envelopes"],
        ["staples", "office depot", "viking"],
    ),
    "rent": (["rent", "lease", "premises", "office space", "landlord", "deposit"], ["regus"]),
    "software": (
        ["licence", "subscription", "saas", "cloud", "seats", "renewal"],
        ["microsoft", "atlassian", "adobe"],
    ),
    "travel": (
        ["flight", "hotel", "taxi", "train ticket", "per diem", "mileage"],
        ["lufthansa", "hilton", "uber"],
    ),
    "utilities": (
        ["electricity", "water", "gas", "heating", "meter reading", "power"],
        ["eon", "vattenfall"],
    ),
}
LABELS = list(ACCOUNTS)
SHARED_WORDS = ["invoice", "payment", "monthly", "q3", "ref", "net 30", "correction"]
SHARED_VENDORS = ["amazon", "paypal", "card payment"]
ROWS_PER_SPLIT = {"train": 40, "validation": 10, "test": 10}


def serialized_rows(rng: np.random.Generator, label_id: int, count: int, split: str) -> list:
    """Texts shaped like the serialize stage's. A quarter of the memos name another account's
    item and half the vendors sell everything, so the classes overlap and have to be learnt."""
    words, vendors = ACCOUNTS[LABELS[label_id]]
    other_words = [w for ws, _ in ACCOUNTS.values() if ws is not words for w in ws]
    rows = []
    for i in range(count):
        item = rng.choice(words if rng.random() < 0.75 else other_words)
        vendor = rng.choice(vendors if rng.random() < 0.5 else SHARED_VENDORS)
        text = " | ".join(
            [
                f"memo: {item} {' '.join(rng.choice(SHARED_WORDS, 2))}",
                f"vendor: {vendor}",
                f"amount: +1e{rng.integers(1, 5)}",
            ]
        )
        rows.append({"id": f"{split}-{label_id}-{i}", "text": text, "label_id": label_id})
    return rows


def write_dataset(folder) -> BaselinePaths:
    """300 rows, 5 accounts with 60 rows each and one without any, split 40/10/10 per class."""
    rng = np.random.default_rng(0)
    for split, count in ROWS_PER_SPLIT.items():
        rows = [
            row
            for label_id, (words, _) in enumerate(ACCOUNTS.values())
            if words
            for row in serialized_rows(rng, label_id, count, split)
        ]
        frame = pl.DataFrame(
            rows, schema={"id": pl.String, "text": pl.String, "label_id": pl.Int32}
        )
        frame.sample(fraction=1.0, shuffle=True, seed=0).write_parquet(folder / f"{split}.parquet")
    counts = {label: 60 if words else 0 for label, (words, _) in ACCOUNTS.items()}
    label_map = {"label_column": "label", "labels": LABELS, "counts": counts}
    (folder / "label_map.json").write_text(json.dumps(label_map))
    return output_paths(folder, folder / "out")


def output_paths(data, out) -> BaselinePaths:
    return BaselinePaths(
        train=data / "train.parquet",
        validation=data / "validation.parquet",
        test=data / "test.parquet",
        label_map=data / "label_map.json",
        model=out / "model.joblib",
        metrics=out / "metrics.json",
        predictions=out / "predictions.parquet",
        evidence=out / "evidence",
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    paths = write_dataset(tmp_path_factory.mktemp("baseline"))
    report = train_baseline(paths, BaselineSettings.of())
    return paths, report


def test_baseline_learns_the_accounts_well_above_chance(trained):
    _, report = trained
    # Chance is 1/5 over the five accounts with samples.
    for split in ("validation", "test"):
        assert report[split]["macro_f1"] > 0.5
        assert report[split]["accuracy"] > 0.5
        assert report[split]["top_3_accuracy"] >= report[split]["accuracy"]


def test_metrics_file_lists_every_account_and_the_training_run(trained):
    paths, report = trained
    written = json.loads(paths.metrics.read_text())

    assert written == report
    assert written["train_seconds"] > 0
    assert written["train_rows"] == 200
    assert written["classes_in_train"] == 5
    assert written["settings"] == BaselineSettings.of().to_dict()
    for split in ("validation", "test"):
        assert list(written[split]["per_class"]) == LABELS
        assert written[split]["per_class"]["legal fees"]["zero_support"] is True
        assert written[split]["macro_f1_classes"] == 5
        assert written[split]["samples"] == 50


def test_predictions_rank_the_top_k_accounts_of_every_test_record(trained):
    paths, _ = trained
    predictions = pl.read_parquet(paths.predictions)
    test = pl.read_parquet(paths.test)

    assert predictions.schema == pl.Schema(
        {
            "id": pl.String,
            "label_id": pl.Int32,
            "label": pl.String,
            PREDICTED_LABEL_ID: pl.Int32,
            "predicted_label": pl.String,
            "confidence": pl.Float32,
            TOP_K_LABEL_IDS: pl.List(pl.Int32),
            "top_k_labels": pl.List(pl.String),
            TOP_K_PROBABILITIES: pl.List(pl.Float32),
        }
    )
    # Readable without the label map: the names of the true and the predicted account.
    for row in predictions.iter_rows(named=True):
        assert row["label"] == LABELS[row["label_id"]]
        assert row["predicted_label"] == LABELS[row[PREDICTED_LABEL_ID]]
        assert row["top_k_labels"] == [LABELS[i] for i in row[TOP_K_LABEL_IDS]]
        assert row["confidence"] == row[TOP_K_PROBABILITIES][0]
    assert predictions["id"].to_list() == test["id"].to_list()
    assert predictions["label_id"].to_list() == test["label_id"].to_list()
    ids = np.array(predictions[TOP_K_LABEL_IDS].to_list())
    probabilities = np.array(predictions[TOP_K_PROBABILITIES].to_list())
    assert ids.shape == probabilities.shape == (50, 3)
    assert (ids[:, 0] == predictions[PREDICTED_LABEL_ID].to_numpy()).all()
    assert (np.diff(probabilities, axis=1) <= 0).all()
    assert (probabilities.sum(axis=1) <= 1 + 1e-6).all()
    # An account never seen in train cannot be predicted.
    assert not (ids == LABELS.index("legal fees")).any()


def test_saved_pipeline_reproduces_the_test_predictions(trained):
    paths, _ = trained
    pipeline = joblib.load(paths.model)
    test = pl.read_parquet(paths.test)
    predictions = pl.read_parquet(paths.predictions)

    probabilities = predict_probabilities(pipeline, test["text"].to_list(), len(LABELS))

    assert probabilities.shape == (50, len(LABELS))
    assert np.allclose(probabilities.sum(axis=1), 1)
    ids, _ = top_k(probabilities, 3)
    assert ids.tolist() == predictions[TOP_K_LABEL_IDS].to_list()
    # The written probabilities are the calibrated ones: temperature-scaled log-probabilities.
    temperature = json.loads(paths.metrics.read_text())["calibration"]["temperature"]
    calibrated = softmax(
        baseline_logits(pipeline, test["text"].to_list(), len(LABELS)), temperature
    )
    assert np.allclose(
        np.take_along_axis(calibrated, ids, axis=1),
        np.array(predictions[TOP_K_PROBABILITIES].to_list()),
        atol=1e-6,
    )
    assert temperature != pytest.approx(1.0)


def test_same_seed_gives_the_same_model_on_any_thread_count(trained, tmp_path):
    paths, report = trained
    again = output_paths(paths.train.parent, tmp_path)

    rerun = train_baseline(again, BaselineSettings.of(), threads=2)

    without_time = {k: v for k, v in report.items() if k != "train_seconds"}
    assert {k: v for k, v in rerun.items() if k != "train_seconds"} == without_time
    assert pl.read_parquet(again.predictions).equals(pl.read_parquet(paths.predictions))


def test_two_baseline_jobs_on_the_same_split_write_the_same_model_file(trained, tmp_path):
    """The same split and seed give the same model.joblib, byte for byte, in two new processes
    (as two runs of the baseline job) on one thread and on two: nothing of the fitting process
    (a thread count, an object's memory address) is kept. Compared between new processes: in a
    process that did other work before, pickle may share an equal object another does not."""
    paths, _ = trained
    fit = (
        "import sys; from pathlib import Path;"
        "from account_tax.evaluation.baseline import"
        " BaselinePaths, BaselineSettings, train_baseline;"
        "paths = BaselinePaths(*map(Path, sys.argv[2:]));"
        "train_baseline(paths, BaselineSettings.of(), threads=int(sys.argv[1]))"
    )
    written = []
    for threads in (1, 2):
        again = output_paths(paths.train.parent, tmp_path / str(threads))
        command = [sys.executable, "-c", fit, str(threads), *map(str, vars(again).values())]
        subprocess.run(command, check=True)
        written.append(again.model.read_bytes())
    assert written[0] == written[1]


def test_an_empty_validation_split_scores_as_undefined(trained, tmp_path):
    paths, _ = trained
    empty = tmp_path / "validation.parquet"
    pl.read_parquet(paths.validation).clear().write_parquet(empty)
    settings = replace(BaselineSettings.of(), top_k=2)

    report = train_baseline(
        replace(output_paths(paths.train.parent, tmp_path), validation=empty), settings
    )

    assert report["validation"]["samples"] == 0
    assert report["validation"]["macro_f1"] is None
    assert report["test"]["macro_f1"] > 0.5
    assert pl.read_parquet(tmp_path / "predictions.parquet")[TOP_K_LABEL_IDS].list.len().eq(2).all()


def test_label_ids_outside_the_label_map_are_rejected_with_the_file_named(trained, tmp_path):
    paths, _ = trained
    bad = tmp_path / "test.parquet"
    frame = pl.read_parquet(paths.test)
    frame.with_columns(pl.lit(len(LABELS), dtype=pl.Int32).alias("label_id")).write_parquet(bad)

    with pytest.raises(DataError, match=r"test\.parquet: 50 row\(s\) with a label id"):
        train_baseline(
            replace(paths, test=bad, model=tmp_path / "model.joblib"), BaselineSettings.of()
        )
    assert not (tmp_path / "model.joblib").exists()


def test_a_train_split_with_one_account_is_rejected(trained, tmp_path):
    paths, _ = trained
    one = tmp_path / "train.parquet"
    pl.read_parquet(paths.train).filter(pl.col("label_id") == 1).write_parquet(one)

    with pytest.raises(DataError, match="at least 2 classes"):
        train_baseline(replace(paths, train=one), BaselineSettings.of())


def run_script(monkeypatch, *arguments: str) -> None:
    """Run scripts/baseline.py as `python scripts/baseline.py ...` does, in this process (a
    subprocess would spend seconds importing scikit-learn again)."""
    script = REPO / "scripts" / "baseline.py"
    monkeypatch.setattr(sys, "argv", [str(script), *arguments])
    runpy.run_path(str(script), run_name="__main__")


def test_script_trains_from_the_command_line(trained, tmp_path, monkeypatch):
    paths, _ = trained

    run_script(
        monkeypatch,
        "--train", str(paths.train),
        "--validation", str(paths.validation),
        "--test", str(paths.test),
        "--label-map", str(paths.label_map),
        "--model-output", str(tmp_path / "model.joblib"),
        "--metrics", str(tmp_path / "metrics.json"),
        "--predictions", str(tmp_path / "predictions.parquet"),
        "--evidence", str(tmp_path / "evidence"),
        "--settings", json.dumps({"baseline": {"top_k": 4, "max_iter": 20}}),
    )  # fmt: skip

    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["settings"]["max_iter"] == 20
    assert metrics["test"]["macro_f1"] > 0.5
    predictions = pl.read_parquet(tmp_path / "predictions.parquet")
    assert predictions[TOP_K_LABEL_IDS].list.len().eq(4).all()
    assert (tmp_path / "model.joblib").is_file()
    assert EvidenceIndex.read(tmp_path / "evidence").records.height == 250


def test_evidence_index_finds_each_training_record_itself(trained):
    """The index holds the train and validation records in TF-IDF space; a train record's nearest
    indexed record is itself, at similarity 1."""
    paths, _ = trained
    index = EvidenceIndex.read(paths.evidence)
    train = pl.read_parquet(paths.train)
    assert index.records.height == train.height + pl.read_parquet(paths.validation).height
    assert index.records["split"].value_counts().sort("split").rows() == [
        ("train", 200),
        ("validation", 50),
    ]
    pipeline = joblib.load(paths.model)
    unique = train.filter(pl.col("text").is_unique()).head(20)
    found = index.nearest(baseline_features(pipeline, unique["text"].to_list()), 3)
    assert index.records[found.rows[:, 0]]["id"].to_list() == unique["id"].to_list()
    assert np.allclose(found.similarities[:, 0], 1.0, atol=1e-4)
    assert (np.diff(found.similarities, axis=1) <= 0).all()
    assert index.records[found.rows[:, 0]]["account"].to_list() == [
        LABELS[i] for i in unique["label_id"]
    ]


def test_weighing_ngrams_name_the_words_behind_the_suggestion(trained):
    """The n-grams shown for a suggestion are the record's own, and those the suggested class
    weighs most: a toner invoice suggested as office supplies shows "toner"."""
    paths, _ = trained
    pipeline = joblib.load(paths.model)
    texts = ["memo: toner invoice | vendor: staples", "memo: hotel ref | vendor: hilton"]
    office, travel, legal = (
        LABELS.index(name) for name in ("office supplies", "travel", "legal fees")
    )
    features = baseline_features(pipeline, texts)
    ngrams = weighing_ngrams(pipeline, features, np.array([office, travel]))
    assert any("toner" in ngram for ngram in ngrams[0])
    assert any("staples" in ngram for ngram in ngrams[0])
    assert any("hotel" in ngram or "hilton" in ngram for ngram in ngrams[1])
    for row, text in zip(ngrams, texts, strict=True):
        assert 1 <= len(row) <= 3
        assert all(word in text for ngram in row for word in ngram.split())
        assert not any(a in b for a in row for b in row if a is not b)
    # A class the baseline never saw has nothing that speaks for it.
    assert weighing_ngrams(pipeline, features, np.array([legal, legal])) == [[], []]


def test_weighing_ngrams_of_a_baseline_of_two_classes():
    """A linear classifier of two classes keeps one coefficient row, the second class's: each
    class's suggestion shows its own words."""
    pipeline = build_pipeline(BaselineSettings.of(min_df=1))
    texts = ["office paper staples", "paper for the printer", "fuel at shell", "shell diesel fuel"]
    pipeline.fit(texts, np.array([3, 3, 7, 7]))
    features = baseline_features(pipeline, ["staples paper", "diesel shell"])
    paper, fuel = weighing_ngrams(pipeline, features, np.array([3, 7]))
    assert any("paper" in ngram or "staples" in ngram for ngram in paper)
    assert not any("shell" in ngram or "diesel" in ngram for ngram in paper)
    assert any("shell" in ngram or "diesel" in ngram for ngram in fuel)


def test_script_ends_bad_input_with_exit_status_2(trained, tmp_path, monkeypatch, caplog):
    """Every option given, so that the exit is the bad label map's, not argparse's."""
    paths, _ = trained
    short_map = tmp_path / "label_map.json"
    short_map.write_text(json.dumps({"label_column": "label", "labels": LABELS[:2], "counts": {}}))

    with pytest.raises(SystemExit) as exit_:
        run_script(
            monkeypatch,
            "--train", str(paths.train),
            "--validation", str(paths.validation),
            "--test", str(paths.test),
            "--label-map", str(short_map),
            "--model-output", str(tmp_path / "model.joblib"),
            "--metrics", str(tmp_path / "metrics.json"),
            "--predictions", str(tmp_path / "predictions.parquet"),
            "--evidence", str(tmp_path / "evidence"),
            "--settings", "{}",
        )  # fmt: skip
    assert exit_.value.code == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1
    assert "label id missing or outside" in errors[0]
    assert str(paths.train) in errors[0]
    assert not (tmp_path / "metrics.json").exists()


def test_script_help_lists_its_options(monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_:
        run_script(monkeypatch, "--help")

    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for option in ("--train", "--validation", "--test", "--label-map", "--model-output"):
        assert option in out
