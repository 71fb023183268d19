"""End to end with training: the whole workflow on a small ledger with a tiny BERT, trained in
two segments, evaluated against the baseline, used to predict new records, with every checkpoint
and the model uploaded to a real S3 server (SeaweedFS) and old checkpoints retained by receipt."""

import codecs
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import mlflow
import numpy as np
import openpyxl
import pandas as pd
import polars as pl
import pytest
from browser import open_page
from mlflow import MlflowClient
from s3_helpers import BUCKET
from sample_ledger import ledger_config, ledger_row, small_ledger
from tiny_models import build_tiny_bert
from workflow_runner import REPO, SECRETS, VENV_BIN, jobs_run, snakemake

from account_tax.data.clean import CleanCounts, CleanSettings
from account_tax.data.corrections import apply_corrections
from account_tax.data.spec import DataSpec
from account_tax.evaluation.evidence import EVIDENCE_COLUMNS
from account_tax.evaluation.ledger_rules import RULE_ACCOUNT, RULE_BOOKINGS, LedgerRules
from account_tax.evaluation.predict import (
    BATCH_SIZE,
    PROVENANCE_COLUMNS,
    Candidate,
    Predictor,
    Provenance,
    predict_records,
)
from account_tax.evaluation.prediction_parts import (
    PART_FILES,
    PredictPaths,
    PredictSettings,
    write_review_csv,
    write_review_workbook,
)
from account_tax.evaluation.runtime_check import check_runtime, checked_onnx_model
from account_tax.evaluation.shipped import read_shipped
from account_tax.io import parquet_rows, sha256_file
from account_tax.ports import free_ports
from account_tax.settings import complete
from account_tax.storage.manifest import content_sha256
from account_tax.tracking.registry import save_prediction_model
from account_tax.training.evidence import EvidenceIndex
from account_tax.training.head_init import trained_head
from account_tax.training.inference import load_classifier, rewrite_head, score_texts
from account_tax.training.onnx_model import export_onnx

pytestmark = pytest.mark.workflow
pytest_plugins = ["s3_fixtures"]

CORPUS = [
    "memo office supplies rent sales revenue bank no #",
    "vendor acme gmbh amount +1e1 +1e2 month 3",
    *"0123456789|:#+",
] * 3


@pytest.fixture(scope="module")
def trained(tmp_path_factory, s3_server):
    workdir = tmp_path_factory.mktemp("trained")
    small_ledger(workdir / "ledger.csv")
    new_records = workdir / "new.csv"
    rows = [
        ledger_row(500, memo="office supplies no 1", account=""),
        ledger_row(501, memo="rent no 2", account="4210"),
        ledger_row(502, memo="sales revenue", account="4400"),
        ledger_row(503, amount="not a number"),
    ]
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_csv(new_records)

    config = ledger_config(workdir / "ledger.csv", classes=["4930", "4210", "4400", "1800", "0000"])
    config["train"] = {
        "model": str(build_tiny_bert(workdir / "tiny-bert", CORPUS)),
        "max_length": 48,
        "epochs": 4,
        "per_device_batch_size": 8,
        "learning_rate": 0.01,
        "checkpoint_every_steps": 4,
        "segments": 2,
        "lora": {"r": 4, "alpha": 8},
        # Every epoch, so that both segments train (early stopping has tests of its own).
        "early_stopping": {"patience": None},
        # The tiny model's embeddings lie close together; the final head has tests of its own.
        "final_head": "learned",
    }
    # Reviewers whose spreadsheet writes decimal commas (Excel in German) open semicolons.
    config["predict"] = {"inputs": {"new": str(new_records)}, "review_csv_separator": ";"}
    # The ledger is small: a threshold may rest on a few validation rows, so both decisions occur.
    config["review"] = {"target_precision": 0.5, "confidence_level": 0.5}
    config["evaluate"] = {"bootstrap_resamples": 200, "amount_column": "amount"}
    config["upload"] = {"bucket": BUCKET, "prefix": "workflow-test", "multipart_threshold_mb": 5}
    config["retain"] = {"keep_last": 1, "metric": "validation_loss", "mode": "min"}
    result = snakemake(workdir, config=config, env=s3_server.env())
    return workdir, config, result, s3_server


def test_every_stage_ran_once(trained):
    _, _, result, _ = trained
    assert jobs_run(result) == {
        "all": 1,
        "ingest": 1,
        "clean": 1,
        "features": 1,
        "split": 1,
        "serialize": 3,
        "baseline": 1,
        "train": 2,
        "evaluate": 1,
        "predict_ingest": 1,
        "predict_shard": 1,
        "predict": 1,
        "upload_checkpoints": 2,
        "upload_model": 1,
        "retain": 2,
        "register": 1,
        "resources": 1,
    }


def test_editing_an_evaluation_module_reruns_evaluate_not_train(trained, tmp_path):
    """A metric edited in evaluation/metrics.py (in a copy of the package, put first on the
    path): the plan re-runs the scorers that use it (evaluate, and the baseline beside train) and
    what follows, never train, whose code and checkpoint fingerprint reach no evaluation code
    (tests/test_import_direction.py), nor the data stages or the uploads."""
    workdir, config, _, server = trained
    package = tmp_path / "src" / "account_tax"
    shutil.copytree(REPO / "src" / "account_tax", package)
    with (package / "evaluation" / "metrics.py").open("a") as handle:
        handle.write("# an edited metric\n")
    env = server.env() | {"PYTHONPATH": str(package.parent)}
    planned = snakemake(workdir, "-n", config=config, env=env)
    jobs = jobs_run(planned)
    # The ingested new records are a temporary file: their shards need them again.
    assert set(jobs) == {
        "baseline",
        "evaluate",
        "predict_ingest",
        "predict_shard",
        "predict",
        "register",
        "resources",
        "all",
    }, jobs
    # Unedited, the same copy plans nothing: only the edit made the difference.
    (package / "evaluation" / "metrics.py").write_bytes(
        (REPO / "src/account_tax/evaluation/metrics.py").read_bytes()
    )
    assert jobs_run(snakemake(workdir, "-n", config=config, env=env)) == {}


def test_training_ran_in_two_segments_with_checkpoints_outside_the_outputs(trained):
    workdir, *_ = trained
    first = json.loads((workdir / "results/train/segment-1/marker.json").read_text())
    last = json.loads((workdir / "results/train/segment-2/marker.json").read_text())
    metrics = json.loads((workdir / "results/train/segment-2/metrics.json").read_text())
    # 48 training rows in batches of 8: 6 steps an epoch, 24 in all, 12 per segment.
    assert (first["step"], last["step"], last["total_steps"]) == (12, 24, 24)
    assert metrics["steps"] == 24 and metrics["resumed_from_step"] == 12
    checkpoints = sorted(p.name for p in (workdir / "checkpoints/train").glob("run-*/step-*"))
    assert checkpoints[-1] == "step-000000024"
    # Both jobs of the one rule exported the best model they had; the last one's is evaluated.
    halfway = json.loads((workdir / "results/train/segment-1/metrics.json").read_text())
    assert halfway["steps"] == 12 and halfway["stopped"] == "the segment's end"
    exported = {}
    for segment, steps in ((1, 12), (2, 24)):
        outputs = workdir / f"results/train/segment-{segment}"
        assert (outputs / "model/adapter_model.safetensors").is_file()
        info = json.loads((outputs / "model/training_info.json").read_text())
        exported[segment] = info["exported"]["step"]
        assert len((outputs / "history.jsonl").read_text().splitlines()) == steps
    # Each exported the best epoch's end (6 steps an epoch) of the steps it had, the one its
    # metrics name.
    assert exported[1] in (6, 12) and exported[2] in (6, 12, 18, 24)
    assert (halfway["exported_step"], metrics["exported_step"]) == (exported[1], exported[2])


def test_evaluation_compares_with_the_baseline_and_says_which_wins(trained):
    workdir, *_ = trained
    report = json.loads((workdir / "results/evaluate/metrics.json").read_text())
    for split in ("validation", "test"):
        assert 0 <= report[split]["accuracy"] <= 1
        assert len(report[split]["per_class"]) == 5
        for model in (report, report["baseline"]):
            calibration = model[split]["calibration"]
            assert set(calibration) == {"before", "after"}
            assert set(calibration["after"]) == {"nll", "brier", "ece"}
    assert report["test"]["per_class"]["0000"]["zero_support"] is True
    assert report["baseline"]["test"]["macro_f1"] is not None
    info = json.loads((workdir / "results/train/segment-2/model/training_info.json").read_text())
    assert report["temperature"] == info["calibration"]["temperature"] > 0
    # Temperature fitting on validation never makes its NLL worse.
    calibration = info["calibration"]
    assert calibration["validation_nll_after"] <= calibration["validation_nll_before"] + 1e-9
    for model in (report, report["baseline"], report["ensemble"]):
        review = model["review"]
        assert review["target_precision"] == 0.5 and review["confidence_level"] == 0.5
        test = review["test"]
        assert 0 <= test["coverage"] <= 1 and set(test) >= {"amount_coverage", "precision"}

    comparison = report["comparison"]
    assert comparison["verdict"] in ("better", "no significant difference", "worse")
    assert comparison["model_beats_baseline"] == (comparison["verdict"] == "better")
    bootstrap = comparison["bootstrap"]
    assert bootstrap["resamples"] == 200
    for model in ("fine-tuned", "baseline", "ensemble"):
        for metric in ("accuracy", "macro_f1", "top_3_accuracy", "coverage"):
            interval = bootstrap["models"][model][metric]
            assert interval["low"] <= interval["value"] <= interval["high"]
    difference = comparison["difference"]
    assert difference["low"] <= difference["value"] <= difference["high"]
    assert difference["value"] == pytest.approx(
        report["test"]["macro_f1"] - report["baseline"]["test"]["macro_f1"]
    )
    # Predictions use the baseline unless a candidate is better on validation with 95 %
    # confidence, and then the best of those; the page says which and why.
    shipped = comparison["shipped"]
    scores = shipped["validation_macro_f1"]
    leads = shipped["validation_difference_from_baseline"]
    better = [name for name, lead in leads.items() if lead["low"] > 0]
    if better:
        assert scores[shipped["candidate"]] == max(scores[name] for name in better)
    else:
        assert shipped["candidate"] == "baseline"
    assert 0 <= report["ensemble"]["weight"] <= 1
    summary = (workdir / "results/evaluate/summary.html").read_text()
    assert f"Predictions use the {shipped['candidate']} candidate" in summary
    expected = {
        "better": "is better than",
        "worse": "is WORSE than",
        "no significant difference": "No significant difference",
    }
    assert expected[comparison["verdict"]] in summary
    run = json.loads((workdir / "results/tracking/run.json").read_text())
    assert run["run_id"] in summary
    plots = (
        "training_curves",
        "confusion_matrix",
        "f1_vs_support",
        "baseline_comparison",
        "reliability",
        "precision_coverage",
    )
    for plot in plots:
        assert (workdir / f"results/evaluate/{plot}.png").read_bytes()[:4] == b"\x89PNG"
    # The test predictions can be read without the label map.
    predictions = pl.read_parquet(workdir / "results/evaluate/test_predictions.parquet")
    assert set(predictions["candidate"]) == {shipped["candidate"]}
    labels = json.loads((workdir / "results/features/label_map.json").read_text())["labels"]
    for row in predictions.iter_rows(named=True):
        assert row["label"] == labels[row["label_id"]]
        assert row["predicted_label"] == labels[row["predicted_label_id"]]


def test_predictions_for_new_records_with_rejects(trained):
    workdir, *_ = trained
    predictions = pl.read_parquet(workdir / "results/predict/new.parquet")
    rejects = pl.read_parquet(workdir / "results/predict/new.rejects.parquet")
    review = pl.read_parquet(workdir / "results/predict/new.review.parquet")
    assert predictions.height + rejects.height == 4
    assert rejects.get_column("reason").to_list() == [
        "unparseable number (format 1234.5) in column 'amount': 'not a number'"
    ]
    assert predictions.get_column("id").to_list() == ["E00500", "E00501", "E00502"]
    assert predictions.get_column("account").to_list() == [None, "4210", "4400"]
    # Each record's own columns as read, so that a reviewed row is a whole record (corrections).
    assert predictions.get_column("memo").to_list() == [
        "office supplies no 1",
        "rent no 2",
        "sales revenue",
    ]
    assert predictions.select("entry_id", "vendor", "amount", "date").row(0) == (
        "E00500",
        "Acme GmbH",
        "1234.50",
        "2024-03-15",
    )
    shipped = json.loads((workdir / "results/evaluate/metrics.json").read_text())["comparison"][
        "shipped"
    ]
    threshold = shipped["threshold"]
    labels = {"4930", "4210", "4400", "1800", "0000"}
    for row in predictions.iter_rows(named=True):
        assert len(row["top_k_labels"]) == 3 and set(row["top_k_labels"]) <= labels
        assert row["predicted_label"] == row["top_k_labels"][0]
        probabilities = row["top_k_probabilities"]
        assert probabilities == sorted(probabilities, reverse=True)
        assert 0 < sum(probabilities) <= 1 + 1e-6
        assert row["confidence"] == probabilities[0]
        assert row["auto_threshold"] == threshold
        assert row["candidate"] == shipped["candidate"]
        confident = threshold is not None and row["confidence"] >= threshold
        posted = confident and not row["novel"]
        assert row["decision"] == ("auto" if posted else "review")
        reached = "threshold" if confident else "below_threshold"
        why = "no_threshold" if threshold is None else reached
        assert row["decision_reason"] == ("novel" if row["novel"] else why)
        # The evidence: the nearest training records in the shipped candidate's index.
        assert len(row["evidence_ids"]) == len(row["evidence_accounts"]) == 3
        assert set(row["evidence_accounts"]) <= labels
        assert row["evidence_similarities"] == sorted(row["evidence_similarities"], reverse=True)
        agree = [account == row["predicted_label"] for account in row["evidence_accounts"]]
        assert row["evidence_agreement"] == pytest.approx(sum(agree) / 3)
        assert row["novel"] == (row["nearest_similarity"] < shipped["novelty_threshold"])
    # The rows to review, least confident first, with their alternatives.
    expected = predictions.filter(pl.col("decision") == "review").sort("confidence", "source_row")
    assert review.equals(expected)


def assert_reviewed_file_corrects(trained, reviewed, review, chosen, folder):
    """`reviewed`, predict's rows to review (`review`) with the accounts `chosen` filled in,
    applied as corrections: the records, new to the ledger, join it with those accounts and
    their own columns as read, and their suggestions make the track record."""
    workdir, config, *_ = trained
    settings = complete(config)
    counts = apply_corrections(
        workdir / "results/clean/records.parquet",
        [reviewed],
        DataSpec.from_config(settings),
        CleanSettings.of(settings["clean"]),
        folder / "corrected.parquet",
        folder / "rejects.parquet",
        folder / "track_record.parquet",
        ledger_rows=CleanCounts.read(workdir / "results/clean/counts.json").rows_in,
    )

    assert (counts.added, counts.rejected, counts.track_record) == (review.height, 0, review.height)
    corrected = pl.read_parquet(folder / "corrected.parquet")
    joined = corrected.filter(pl.col("entry_id").is_in(review["id"].to_list()))
    assert dict(joined.select("entry_id", "account").iter_rows()) == dict(
        zip(review["id"], chosen, strict=True)
    )
    assert set(joined["label_source"]) == {"correction"}
    as_read = pl.read_csv(workdir / "new.csv", infer_schema=False)
    assert dict(joined.select("entry_id", "vendor").iter_rows()) == {
        entry: vendor.lower()
        for entry, vendor in as_read.select("entry_id", "vendor").iter_rows()
        if entry in joined["entry_id"]
    }
    track_record = pl.read_parquet(folder / "track_record.parquet").sort("id")
    suggested = review.sort("id")
    assert track_record["predicted_label"].to_list() == suggested["predicted_label"].to_list()
    assert track_record["confidence"].to_list() == pytest.approx(
        suggested["confidence"].to_list(), rel=1e-6
    )


def test_the_review_csv_filled_in_as_a_spreadsheet_would_is_a_corrections_file(trained, tmp_path):
    """The rows to review for spreadsheets: the review file's columns, rows and order, each list a
    cell with an item a line. Its account column filled in and saved again as all text, it
    corrects: the records (new to the ledger) join it with the accounts people chose, and their
    suggestions make the track record. The rule's copy has the review file's columns and rows; its
    values are checked on a copy of every prediction, as a review file holds them when none clears
    the threshold."""
    workdir, *_ = trained
    predict = workdir / "results/predict"
    shipped = pl.read_csv(predict / "new.review.csv", infer_schema=False, separator=";")
    assert shipped.columns == pl.read_parquet_schema(predict / "new.review.parquet").names()
    assert shipped.height == parquet_rows(predict / "new.review.parquet")
    # Here every prediction cleared the threshold.
    review = pl.read_parquet(predict / "new.parquet").sort("confidence", "source_row")
    review.write_parquet(tmp_path / "review.parquet")
    write_review_csv(tmp_path / "review.parquet", tmp_path / "review.csv", ";")
    assert (tmp_path / "review.csv").read_bytes().startswith(codecs.BOM_UTF8)
    sheet = pl.read_csv(tmp_path / "review.csv", infer_schema=False, separator=";")
    assert sheet.columns == review.columns
    assert sheet["id"].to_list() == review["id"].to_list()
    for column in ("top_k_labels", "evidence_ids", "evidence_texts", "evidence_accounts"):
        assert sheet[column].to_list() == ["\n".join(cell) for cell in review[column]]
    for column in ("top_k_probabilities", "evidence_similarities"):
        for cell, values in zip(sheet[column], review[column], strict=True):
            assert [float(v) for v in cell.split("\n")] == pytest.approx(values, abs=5e-5)
    assert sheet["confidence"].cast(pl.Float64).to_list() == pytest.approx(
        review["confidence"].to_list(), rel=1e-6
    )
    assert sheet["novel"].to_list() == [str(novel).lower() for novel in review["novel"]]

    chosen = ["1800", "4210", "4400", "4930"][: review.height]
    reviewed = tmp_path / "reviewed.csv"
    sheet.with_columns(pl.Series("account", chosen)).write_csv(
        reviewed, include_bom=True, separator=";"
    )
    assert_reviewed_file_corrects(trained, reviewed, review, chosen, tmp_path)


def test_prediction_in_chunks_of_rows_matches_the_rule(trained, tmp_path):
    """Rows are scored a chunk at a time (flat memory on large files): chunks of one row give the
    rule's predictions, row for row."""
    workdir, config, *_ = trained
    rule_output = pl.read_parquet(workdir / "results/predict/new.parquet")
    model = workdir / "results/train/segment-2/model"
    baseline = workdir / "results/baseline/model.joblib"
    shipped = read_shipped(workdir / "results/evaluate/metrics.json")
    provenance = Provenance(*(rule_output[0, column] for column in PROVENANCE_COLUMNS))
    paths = PredictPaths(*(tmp_path / f"{name}.parquet" for name in ("out", "rejects", "review")))
    settings = complete(config)
    counts = predict_records(
        Path(config["predict"]["inputs"]["new"]),
        Predictor(
            DataSpec.from_config(settings),
            settings,
            Candidate(
                model, baseline, shipped, baseline_evidence=workdir / "results/baseline/evidence"
            ),
            provenance,
            k=settings["predict"]["top_k"],
            evidence_k=settings["predict"]["evidence_k"],
            chunk_rows=1,
        ),
        paths,
    )
    assert counts["predicted"] == rule_output.height == 3
    chunked = pl.read_parquet(paths.predictions)
    # A batch of one row has no padding: bf16 sums may round differently in the last digits.
    varies = (
        "confidence",
        "top_k_probabilities",
        "decision",
        "evidence_similarities",
        "nearest_similarity",
        "novel",
    )
    assert chunked.drop(varies).equals(rule_output.drop(varies))
    assert np.allclose(chunked["confidence"], rule_output["confidence"], atol=2e-3)
    assert np.allclose(
        np.stack(chunked["evidence_similarities"].to_list()),
        np.stack(rule_output["evidence_similarities"].to_list()),
        atol=2e-3,
    )
    threshold = shipped.threshold
    posted = [
        threshold is not None and c >= threshold and not novel
        for c, novel in zip(chunked["confidence"], chunked["novel"], strict=True)
    ]
    assert (chunked["decision"] == "auto").to_list() == posted


def test_shards_gathered_equal_one_job_row_for_row(trained, tmp_path):
    """The ledger (65 rows, 2 unusable without the label's check) predicted in shards of whole
    chunks and gathered gives the files of one job, to the last bit: the predictions and rejects
    in input order, the rows to review least confident first, ties in input order (with no
    auto-post threshold every row is to review); more shards than chunks leaves some shards
    empty. The counts add up."""
    workdir, config, *_ = trained
    settings = complete(config)
    model, baseline = workdir / "results/train/segment-2/model", workdir / "results/baseline"
    shipped = read_shipped(workdir / "results/evaluate/metrics.json")
    predictor = Predictor(
        DataSpec.from_config(settings),
        settings,
        Candidate(
            model,
            baseline / "model.joblib",
            dataclasses.replace(shipped, threshold=None),
            baseline_evidence=baseline / "evidence",
        ),
        Provenance(shipped.candidate, "sha", None, None, None),
        k=3,
        evidence_k=3,
        chunk_rows=8,
    )
    outputs = {}
    for shards in (1, 3, 40):
        paths = PredictPaths(*(tmp_path / f"{shards}-{name}.parquet" for name in PART_FILES))
        counts = predict_records(workdir / "ledger.csv", predictor, paths, shards)
        assert counts == {"rows_in": 65, "predicted": 63, "review": 63, "rejected": 2, "auto": 0}
        outputs[shards] = [pl.read_parquet(path) for path in dataclasses.astuple(paths)]
    for shards in (3, 40):
        for sharded, whole in zip(outputs[shards], outputs[1], strict=True):
            assert sharded.equals(whole), shards
    predictions, rejects, review = outputs[1]
    assert predictions["source_row"].is_sorted() and rejects["source_row"].is_sorted()
    assert review.equals(predictions.sort("confidence", "source_row"))


def test_the_model_carries_an_index_in_which_a_training_record_finds_itself(trained):
    """Training exports the model with its evidence index: the train and validation records,
    their vectors sealed by the model's manifest; a training record's nearest indexed record is
    itself (or a record with the same text), at similarity 1."""
    workdir, *_ = trained
    model = workdir / "results/train/segment-2/model"
    index = EvidenceIndex.read(model / "evidence")
    train, validation = (
        pl.read_parquet(workdir / f"results/serialize/{name}.parquet")
        for name in ("train", "validation")
    )
    assert index.records["id"].to_list() == [*train["id"], *validation["id"]]
    manifest = json.loads((model / "manifest.json").read_text())
    for name in ("evidence/records.parquet", "evidence/vectors.npy"):
        assert manifest["files"][name] == sha256_file(model / name)
    classifier = load_classifier(model)
    texts = train["text"].to_list()
    _, embeddings = score_texts(classifier.model, classifier.tokenizer, texts, max_length=48)
    found = index.nearest(embeddings, 1)
    assert np.allclose(found.similarities[:, 0], 1.0, atol=1e-2)
    nearest_text = index.records[found.rows[:, 0]]["text"].to_list()
    assert nearest_text == texts


def test_records_unlike_any_training_record_are_novel_and_go_to_review(trained, tmp_path):
    """Gibberish, and the records of a vendor never seen with words never seen, are marked novel
    and sent to review whatever their confidence; a copy of a training record finds the
    original at similarity 1. The novelty threshold is the one evaluate fitted on validation."""
    workdir, config, *_ = trained
    source = tmp_path / "unseen.csv"
    rows = [
        ledger_row(900, memo="qwzx vbnm plkj", vendor="Xqzt Vprw"),
        ledger_row(901, memo="zzzz yyyy xxxx wwww", vendor="Qqq"),
        ledger_row(902, memo="zeppelin charter flight", vendor="Nordwind Luftschiff KG"),
        ledger_row(903, memo="zeppelin hangar fee", vendor="Nordwind Luftschiff KG"),
        ledger_row(3, memo="office supplies no 3", amount="13.00", account="4930"),
    ]
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_csv(source)
    shipped = read_shipped(workdir / "results/evaluate/metrics.json")
    settings = complete(config)
    paths = PredictPaths(*(tmp_path / f"{name}.parquet" for name in ("out", "rejects", "review")))
    model = workdir / "results/train/segment-2/model"
    predict_records(
        source,
        Predictor(
            DataSpec.from_config(settings),
            settings,
            Candidate(
                model,
                workdir / "results/baseline/model.joblib",
                shipped,
                baseline_evidence=workdir / "results/baseline/evidence",
            ),
            Provenance(shipped.candidate, "sha", None, None, None),
            k=3,
            evidence_k=3,
            chunk_rows=settings["predict"]["chunk_rows"],
        ),
        paths,
    )
    predictions = pl.read_parquet(paths.predictions)
    assert shipped.novelty_threshold is not None
    unseen = predictions.filter(pl.col("id") != "E00003")
    assert unseen["novel"].all(), unseen.select("id", "nearest_similarity")
    assert (unseen["nearest_similarity"] < shipped.novelty_threshold).all()
    assert (unseen["decision"] == "review").all()
    review = pl.read_parquet(paths.review)
    assert set(unseen["id"]) <= set(review["id"])
    copy = predictions.row(by_predicate=pl.col("id") == "E00003", named=True)
    assert copy["nearest_similarity"] == pytest.approx(1.0, abs=1e-2)
    assert copy["evidence_ids"][0] in set(
        pl.read_parquet(workdir / "results/serialize/train.parquet").filter(
            pl.col("text").str.starts_with("memo: office supplies no #")
        )["id"]
    )


def test_a_trusted_ledger_rule_posts_the_suggestion_it_confirms(trained, tmp_path):
    """With no threshold every suggestion goes to review; with trusted ledger rules a record
    whose rule names the suggested account is posted, one whose rule names another is not, and
    untrusted rules post nothing. Every record shows its rule, matched as cleaning leaves the
    record (case folded, digits kept)."""
    workdir, config, *_ = trained
    source = tmp_path / "new.csv"
    rows = [
        ledger_row(600, memo="Office supplies no 7"),
        ledger_row(601, memo="Rent no 8"),
        ledger_row(602, memo="Sales revenue no 9"),
    ]
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_csv(source)
    shipped = dataclasses.replace(
        read_shipped(workdir / "results/evaluate/metrics.json"), threshold=None
    )
    settings = complete(config)
    candidate = Candidate(
        workdir / "results/train/segment-2/model",
        workdir / "results/baseline/model.joblib",
        shipped,
        baseline_evidence=workdir / "results/baseline/evidence",
    )

    def predict(rules: LedgerRules | None) -> tuple[pl.DataFrame, pl.DataFrame]:
        paths = PredictPaths(*(tmp_path / f"{name}.parquet" for name in PART_FILES))
        predictor = Predictor(
            DataSpec.from_config(settings),
            settings,
            candidate,
            Provenance(shipped.candidate, "sha", None, None, None),
            k=3,
            evidence_k=3,
            chunk_rows=2,
            rules=rules,
        )
        predict_records(source, predictor, paths)
        return pl.read_parquet(paths.predictions), pl.read_parquet(paths.review)

    alone, review = predict(None)
    assert (alone["decision"] == "review").all() and review.height == 3
    assert alone["rule_account"].is_null().all() and alone["rule_bookings"].is_null().all()
    suggested = dict(zip(alone["id"], alone["predicted_label"], strict=True))
    other = next(label for label in ("4930", "4210", "4400") if label != suggested["E00601"])
    rules = pl.DataFrame(
        {
            "memo": ["office supplies no 7", "rent no 8", "office supplies no 9"],
            RULE_ACCOUNT: [suggested["E00600"], other, suggested["E00602"]],
            RULE_BOOKINGS: [4, 2, 5],
        }
    )
    assert alone["decision_reason"].to_list() == [
        "novel" if novel else "no_threshold" for novel in alone["novel"]
    ]
    confirmed, review = predict(LedgerRules(rules, trusted=True))
    assert confirmed["decision"].to_list() == ["auto", "review", "review"]
    reasons = ["ledger_rule", *alone["decision_reason"].to_list()[1:]]
    assert confirmed["decision_reason"].to_list() == reasons
    assert confirmed["rule_account"].to_list() == [suggested["E00600"], other, None]
    assert confirmed["rule_bookings"].to_list() == [4, 2, None]
    assert review["id"].sort().to_list() == ["E00601", "E00602"]
    assert review["rule_account"].sort().to_list() == [None, other]
    # The rest of each row is what the model said alone.
    ruled = ("decision", "decision_reason", "rule_account", "rule_bookings")
    assert confirmed.drop(ruled).equals(alone.drop(ruled))
    shown, review = predict(LedgerRules(rules, trusted=False))
    assert (shown["decision"] == "review").all() and review.height == 3
    assert shown["rule_account"].to_list() == confirmed["rule_account"].to_list()


def test_the_registered_model_carries_its_runs_ledger_rules(trained, tmp_path):
    """A model registered with trusted ledger rules, served, gives predict's rows with the same
    rules: each record shows the rule it matches, and one whose rule names the suggestion is
    posted where the threshold alone posts nothing."""
    workdir, config, *_ = trained
    settings = complete(config)
    options = PredictSettings.of(settings["predict"])
    source = tmp_path / "new.csv"
    rows = [ledger_row(700, memo="Office supplies no 7"), ledger_row(701, memo="Rent no 8")]
    pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)).write_csv(source)
    shipped = dataclasses.replace(
        read_shipped(workdir / "results/evaluate/metrics.json"), threshold=None
    )
    model = workdir / "results/train/segment-2/model"
    baseline = workdir / "results/baseline/model.joblib"
    evidence = workdir / "results/baseline/evidence"
    candidate = Candidate(model, baseline, shipped, baseline_evidence=evidence)
    provenance = Provenance(shipped.candidate, "sha", None, None, None)
    outputs = PredictPaths(
        *(tmp_path / f"results/predict/{name}.parquet" for name in ("new", "new.rejects", "review"))
    )

    def predict(rules: LedgerRules | None) -> pl.DataFrame:
        predict_records(
            source, Predictor.configured(settings, candidate, provenance, rules), outputs
        )
        return pl.read_parquet(outputs.predictions)

    suggested = predict(None)["predicted_label"].to_list()
    other = next(label for label in ("4930", "4210", "4400") if label != suggested[1])
    rules_file, report = tmp_path / "rules.parquet", tmp_path / "report.json"
    rules = pl.DataFrame(
        {"memo": ["office supplies no 7", "rent no 8"], RULE_ACCOUNT: [suggested[0], other]}
    ).with_columns(pl.lit(3, dtype=pl.Int64).alias(RULE_BOOKINGS))
    rules.write_parquet(rules_file)
    report.write_text(json.dumps({"trusted": True}))
    predicted = predict(LedgerRules.read(rules_file, report))
    assert predicted["decision"].to_list() == ["auto", "review"]

    save_prediction_model(
        tmp_path / "registered",
        config=settings,
        model_dir=model,
        baseline_model=baseline,
        baseline_evidence=evidence,
        shipped=shipped,
        test_predictions=workdir / "results/evaluate/test_predictions.parquet",
        split_records=[workdir / "results/split/test.parquet"],
        provenance=provenance,
        pyproject=REPO / "pyproject.toml",
        predict=options,
        batch_size=BATCH_SIZE,
        rules=(rules_file, report),
    )
    served = mlflow.pyfunc.load_model(str(tmp_path / "registered")).predict(
        raw_records_as_text(source)
    )
    assert list(served[RULE_ACCOUNT]) == [suggested[0], other]
    assert_served_equals_predict(served, tmp_path, "new")


def test_every_prediction_leads_back_to_its_training_run(trained):
    """From one prediction row: the model's files, its S3 copy, and the MLflow run that trained
    it, with the git commit, the config hash and the input data hashes."""
    workdir, _, _, server = trained
    row = pl.read_parquet(workdir / "results/predict/new.parquet").row(0, named=True)
    model_dir = workdir / "results/train/segment-2/model"
    assert row["model_sha256"] == content_sha256(model_dir)
    baseline = sha256_file(workdir / "results/baseline/model.joblib")
    assert row["baseline_sha256"] == (None if row["candidate"] == "fine-tuned" else baseline)
    receipt = json.loads((workdir / "results/upload/model.json").read_text())
    assert row["model_s3_uri"] == f"s3://{receipt['bucket']}/{receipt['prefix']}"
    manifest = server.client().get_object(
        Bucket=receipt["bucket"], Key=receipt["prefix"] + "manifest.json"
    )
    assert (
        json.loads(manifest["Body"].read())["files"]
        == json.loads((model_dir / "manifest.json").read_text())["files"]
    )

    tracking = json.loads((workdir / "results/tracking/run.json").read_text())
    mlflow = MlflowClient(tracking_uri=tracking["tracking_uri"])
    training_run = mlflow.get_run(row["training_run_id"])
    tags = training_run.data.tags
    assert len(tags["git_commit"]) == 40
    assert len(tags["config_sha256"]) == 64
    assert tags["input_sha256.ledger.csv"] == sha256_file(workdir / "ledger.csv")
    assert "train/steps" in training_run.data.metrics
    predicting_run = mlflow.get_run(tracking["run_id"])
    assert predicting_run.data.tags["predict/new/training_run_id"] == row["training_run_id"]
    for key in ("auto", "review", "rejected"):
        assert f"predict/new/{key}" in predicting_run.data.metrics


def test_mlflow_run_has_training_curves_evaluation_and_benchmarks(trained):
    workdir, *_ = trained
    run = json.loads((workdir / "results/tracking/run.json").read_text())
    mlflow = MlflowClient(tracking_uri=run["tracking_uri"])
    metrics = mlflow.get_run(run["run_id"]).data.metrics
    assert len(mlflow.get_metric_history(run["run_id"], "train/loss")) == 24
    assert metrics["train/steps"] == 24
    for key in ("evaluate/test_macro_f1", "baseline/test_macro_f1", "predict/new/predicted"):
        assert key in metrics, key
    for rule in (
        "train/segment-1",
        "train/segment-2",
        "evaluate",
        "baseline",
        "predict/new",
        "predict/new/shard-0",
    ):
        assert metrics[f"{rule}/wall_s"] > 0, rule


def test_checkpoints_and_model_are_in_s3_with_receipts_and_retention_kept_what_it_must(trained):
    workdir, _, _, server = trained
    run = json.loads((workdir / "results/tracking/run.json").read_text())
    s3 = server.client()
    model = json.loads((workdir / "results/upload/model.json").read_text())
    assert model["prefix"] == f"workflow-test/account-tax/{run['run_id']}/model/"
    assert {o["path"] for o in model["objects"]} >= {"adapter_model.safetensors", "manifest.json"}
    for entry in model["objects"]:
        head = s3.head_object(Bucket=BUCKET, Key=model["prefix"] + entry["path"])
        assert head["ContentLength"] == entry["size"]

    # Checkpoints at steps 4, 6 (epoch end), 8, 12 in segment 1 and 16, 18, 20, 24 in segment 2.
    first = json.loads((workdir / "results/upload/checkpoints/segment-1.json").read_text())
    second = json.loads((workdir / "results/upload/checkpoints/segment-2.json").read_text())
    receipts = [
        json.loads((workdir / p).read_text()) for p in first["receipts"] + second["receipts"]
    ]
    steps = [receipt["step"] for receipt in receipts]
    assert sorted(set(steps)) == [4, 6, 8, 12, 16, 18, 20, 24]

    # keep_last 1, the best validation loss and the exported model's checkpoint stay; every
    # other checkpoint was deleted, and only after its receipt proved its upload.
    report = json.loads((workdir / "results/retain/segment-2.json").read_text())
    kept = {entry["step"] for entry in report["kept"]}
    info = json.loads((workdir / "results/train/segment-2/model/training_info.json").read_text())
    assert {24, info["exported"]["step"]} <= kept and len(kept) <= 3
    local = sorted(p.name for p in (workdir / "checkpoints/train").glob("run-*/step-*"))
    assert len(local) == len(kept)
    deleted_everywhere = {
        d["step"]
        for path in ("results/retain/segment-1.json", "results/retain/segment-2.json")
        for d in json.loads((workdir / path).read_text())["deleted"]
    }
    assert deleted_everywhere == set(steps) - kept


def test_the_s3_secret_is_in_no_file_or_log(trained):
    workdir, _, result, server = trained
    secret = server.env()["AWS_SECRET_ACCESS_KEY"]
    assert secret not in result.stdout + result.stderr
    for path in workdir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_report_renders_in_a_real_browser_with_every_category(trained):
    workdir, config, *_ = trained
    snakemake(workdir, "--report", "report.html", config=config)
    screenshot = REPO / "test-artifacts" / "report.png"
    text, errors = open_page(workdir / "report.html", screenshot, "Resources")
    assert errors == []
    for category in ("Clean", "Features", "Split", "Train", "Evaluate", "Register", "Resources"):
        assert category in text, category
    html = (workdir / "report.html").read_text()
    for plot in ("reliability.png", "precision_coverage.png"):
        assert plot in html, plot
    assert screenshot.stat().st_size > 10_000


def test_a_second_workflow_run_gets_its_own_mlflow_run_and_s3_keys(trained):
    workdir, config, _, server = trained
    first_run = json.loads((workdir / "results/tracking/run.json").read_text())
    first = json.loads((workdir / "results/upload/model.json").read_text())
    result = snakemake(
        workdir, "results/upload/model.json", "-R", "upload_model", config=config, env=server.env()
    )
    assert jobs_run(result) == {"upload_model": 1}
    second_run = json.loads((workdir / "results/tracking/run.json").read_text())
    second = json.loads((workdir / "results/upload/model.json").read_text())
    assert second_run["run_id"] != first_run["run_id"]
    assert second["prefix"] != first["prefix"]
    assert second_run["run_id"] in second["prefix"]
    # Both runs' objects are in the one bucket, and both runs in the one MLflow store.
    s3 = server.client()
    for receipt in (first, second):
        keys = {
            o["Key"]
            for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=receipt["prefix"])["Contents"]
        }
        assert keys == {receipt["prefix"] + o["path"] for o in receipt["objects"]}
    mlflow = MlflowClient(tracking_uri=second_run["tracking_uri"])
    run_ids = {run.info.run_id for run in mlflow.search_runs(second_run["experiment_id"])}
    assert {first_run["run_id"], second_run["run_id"]} <= run_ids


def run_evaluate(workdir, train_records, out, split_settings, model=None, test=None):
    """scripts/evaluate.py on the trained workflow's model (or `model`) and splits (test's, or
    `test`: its serialized and split files), with `train_records` as what was trained on; the
    metrics and the summary page."""
    test = test or (
        workdir / "results/serialize/test.parquet",
        workdir / "results/split/test.parquet",
    )
    settings = {
        "review": {"target_precision": 0.5, "confidence_level": 0.5},
        "evaluate": {"bootstrap_resamples": 100, "seed": 13, "amount_column": None},
        "split": split_settings,
    }
    outputs = {
        name: out / file
        for name, file in {
            "metrics": "metrics.json",
            "predictions": "test_predictions.parquet",
            "summary": "summary.html",
            "curves": "curves.png",
            "confusion": "confusion.png",
            "f1-support": "f1.png",
            "comparison": "comparison.png",
            "reliability": "reliability.png",
            "precision-coverage": "precision_coverage.png",
        }.items()
    }
    out.mkdir()
    command = [
        sys.executable,
        str(REPO / "scripts" / "evaluate.py"),
        "--settings",
        json.dumps(settings),
        "--model",
        str(model or workdir / "results/train/segment-2/model"),
        "--validation",
        str(workdir / "results/serialize/validation.parquet"),
        "--test",
        str(test[0]),
        "--train-records",
        str(train_records),
        "--test-records",
        str(test[1]),
        "--history",
        str(workdir / "results/train/segment-2/history.jsonl"),
        "--baseline-model",
        str(workdir / "results/baseline/model.joblib"),
        "--baseline-metrics",
        str(workdir / "results/baseline/metrics.json"),
        "--baseline-evidence",
        str(workdir / "results/baseline/evidence"),
    ]
    for name, path in outputs.items():
        command += [f"--{name}", str(path)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return outputs


def test_evaluate_scores_test_rows_of_groups_never_seen_in_train(trained, tmp_path):
    """With `split.strategy: group`, the test rows whose group is not in train are a slice of
    their own: here the group is the entry id (one row each), and two test rows are added to
    train."""
    workdir, *_ = trained
    train = pl.read_parquet(workdir / "results/split/train.parquet")
    test = pl.read_parquet(workdir / "results/split/test.parquet")
    seen_train = tmp_path / "train.parquet"
    pl.concat([train, test.head(2)]).write_parquet(seen_train)
    outputs = run_evaluate(
        workdir,
        seen_train,
        tmp_path / "evaluate",
        {"strategy": "group", "group_column": "entry_id"},
    )
    report = json.loads(outputs["metrics"].read_text())
    shipped = report["comparison"]["shipped"]["candidate"]
    predictions = pl.read_parquet(outputs["predictions"]).slice(2)
    accuracy = (predictions["label_id"] == predictions["predicted_label_id"]).mean()
    for candidate in (report, report["baseline"], report["ensemble"]):
        unseen = candidate["test"]["unseen_groups"]
        assert unseen["column"] == "entry_id" and unseen["rows"] == test.height - 2
    chosen = report if shipped == "fine-tuned" else report[shipped]
    assert chosen["test"]["unseen_groups"]["accuracy"] == pytest.approx(accuracy)
    assert (
        f"{test.height - 2} rows whose entry_id is not in train" in outputs["summary"].read_text()
    )


def test_evaluate_without_test_rows_gives_no_verdict_and_its_plots(trained, tmp_path):
    """split.test_fraction 0, or classes too small to hold any out: evaluate scores validation,
    fits the threshold, says there is no verdict and draws its plots, where it failed on the
    empty test split's curves."""
    workdir, *_ = trained
    empty = []
    for path in ("results/serialize/test.parquet", "results/split/test.parquet"):
        empty.append(tmp_path / path.replace("/", "-"))
        pl.read_parquet(workdir / path).clear().write_parquet(empty[-1])
    outputs = run_evaluate(
        workdir,
        workdir / "results/split/train.parquet",
        tmp_path / "evaluate",
        {"strategy": "stratified"},
        test=empty,
    )
    report = json.loads(outputs["metrics"].read_text())
    assert report["comparison"]["verdict"] is None
    assert report["validation"]["samples"] > 0 and report["test"]["samples"] == 0
    assert pl.read_parquet(outputs["predictions"]).height == 0
    assert "No verdict: the test split is empty" in outputs["summary"].read_text()
    assert all(outputs[plot].stat().st_size > 0 for plot in ("reliability", "precision-coverage"))


def test_a_model_whose_logits_are_not_numbers_is_refused_by_evaluate(trained, tmp_path):
    """A head of NaN, as a diverged run leaves: evaluate stops naming the model, where the NaN
    confidences made a NaN threshold that posts nothing."""
    workdir, *_ = trained
    diverged = shutil.copytree(workdir / "results/train/segment-2/model", tmp_path / "model")
    rewrite_head(
        diverged,
        lambda model, _: [p.data.fill_(float("nan")) for p in trained_head(model).parameters()],
    )
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run_evaluate(
            workdir,
            workdir / "results/split/train.parquet",
            tmp_path / "evaluate",
            {"strategy": "stratified"},
            model=diverged,
        )
    rows = pl.read_parquet(workdir / "results/serialize/validation.parquet").height
    assert failed.value.returncode == 2
    assert (
        f"{diverged}: {rows} of the {rows} validation rows get logits that are not finite"
        in failed.value.stderr
    )


def test_evaluate_scores_classes_without_training_rows_apart(trained, tmp_path):
    """Test rows of a class left out of the train records are scored apart, for every
    candidate and for the nearest class by text; the baseline cannot rank such a class."""
    workdir, *_ = trained
    train = pl.read_parquet(workdir / "results/split/train.parquet")
    test = pl.read_parquet(workdir / "results/split/test.parquet")
    left_out = test["account"].mode().sort()[0]
    without = tmp_path / "train.parquet"
    train.filter(pl.col("account") != left_out).write_parquet(without)
    outputs = run_evaluate(workdir, without, tmp_path / "evaluate", {"strategy": "stratified"})
    report = json.loads(outputs["metrics"].read_text())
    rows = int((test["account"] == left_out).sum())
    assert report["unseen_classes"]["classes"] == [left_out]
    comparator = report["unseen_classes"]["tfidf_nearest_class"]
    assert comparator["rows"] == rows and comparator["classes"] == 1
    for candidate in (report, report["baseline"], report["ensemble"]):
        unseen = candidate["test"]["unseen_classes"]
        assert unseen["rows"] == rows and 0 <= unseen["top1"] <= unseen["top3"] <= 1
        assert unseen["seen_classes_macro_f1"] is not None
    summary = outputs["summary"].read_text()
    assert f"{rows} rows of 1 classes with no training rows" in summary
    assert "macro_f1 of the classes seen in training" in summary


def test_a_group_account_is_never_suggested_but_counts_in_the_chart_levels(trained, tmp_path):
    """With a chart of groups and leaves (a copy of the model whose label map makes 4930, the
    most frequent account, the group of 4210 and 4400), no candidate predicts the group or lists
    it in the top k, in predict and in evaluate; its test rows still count, as wrong accounts,
    and at the chart's top level a child of it predicted for them is right."""
    workdir, config, *_ = trained
    model = tmp_path / "model"
    shutil.copytree(workdir / "results/train/segment-2/model", model)
    mapping = json.loads((model / "label_map.json").read_text())
    group = "4930"
    mapping["parents"] = [group if code in ("4210", "4400") else None for code in mapping["labels"]]
    mapping["postable"] = [code != group for code in mapping["labels"]]
    (model / "label_map.json").write_text(json.dumps(mapping))
    records = tmp_path / "records.csv"
    columns = list(pl.read_csv(config["predict"]["inputs"]["new"], n_rows=1).columns)
    split = pl.read_parquet(workdir / "results/split/test.parquet").select(columns)
    split.with_columns(pl.all().cast(pl.String)).write_csv(records)
    shipped = read_shipped(workdir / "results/evaluate/metrics.json")
    settings = complete(config)
    baseline = workdir / "results/baseline/model.joblib"
    for candidate in ("fine-tuned", "baseline", "ensemble"):
        paths = PredictPaths(*(tmp_path / f"{candidate}-{n}.parquet" for n in ("o", "r", "v")))
        predict_records(
            records,
            Predictor(
                DataSpec.from_config(settings),
                settings,
                Candidate(
                    model,
                    baseline,
                    dataclasses.replace(shipped, candidate=candidate),
                    baseline_evidence=baseline.with_name("evidence"),
                ),
                Provenance(candidate, "sha", None, None, None),
                k=3,
                evidence_k=3,
                chunk_rows=settings["predict"]["chunk_rows"],
            ),
            paths,
        )
        predicted = pl.read_parquet(paths.predictions)
        assert predicted.height == split.height
        assert group not in set(predicted["predicted_label"]), candidate
        assert not predicted["top_k_labels"].list.contains(group).any(), candidate

    train_records = workdir / "results/split/train.parquet"
    outputs = run_evaluate(
        workdir, train_records, tmp_path / "evaluate", {"strategy": "stratified"}, model
    )
    metrics = json.loads(outputs["metrics"].read_text())
    test = pl.read_parquet(outputs["predictions"])
    assert group not in set(test["predicted_label"])
    assert not test["top_k_labels"].list.contains(group).any()
    per_class = metrics["test"]["per_class"][group]
    assert per_class["support"] > 0 and per_class["recall"] == 0.0
    top, accounts = metrics["hierarchy"]["test"]["levels"]
    assert top["accuracy"] > accounts["accuracy"]


def registry_uri(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'results/tracking/mlflow.db'}"


def raw_records_as_text(path: Path) -> pd.DataFrame:
    """A records CSV the way a client sends it: every cell as text, empty cells empty."""
    return pd.read_csv(path, dtype=str, keep_default_na=False)


FLOAT_COLUMNS = (
    "top_k_probabilities",
    "confidence",
    "auto_threshold",
    "evidence_similarities",
    "evidence_agreement",
    "nearest_similarity",
)


def assert_served_equals_predict(served: pd.DataFrame, workdir: Path, name: str) -> None:
    """The served rows are the predict rule's rows (labels exact, probabilities within 1e-5)
    and its rejected rows with their reasons, in input order."""
    predicted = pl.read_parquet(workdir / f"results/predict/{name}.parquet")
    rejects = pl.read_parquet(workdir / f"results/predict/{name}.rejects.parquet")
    assert list(served["source_row"]) == sorted([*predicted["source_row"], *rejects["source_row"]])
    by_row = served.set_index("source_row")
    for row in predicted.iter_rows(named=True):
        got = by_row.loc[row["source_row"]]
        assert pd.isna(got["reason"])
        for column, value in row.items():
            if column == "source_row":
                continue
            if value is None:
                assert pd.isna(got[column]), column
            elif column in FLOAT_COLUMNS:
                assert np.allclose(got[column], value, atol=1e-5, rtol=0), column
            elif isinstance(value, list):
                assert list(got[column]) == value, column
            else:
                assert got[column] == value, column
    for row in rejects.iter_rows(named=True):
        got = by_row.loc[row["source_row"]]
        assert got["reason"] == row["reason"]
        assert pd.isna(got["predicted_label"])


def test_registered_with_candidate_alias_and_champion_only_when_better(trained):
    workdir, *_ = trained
    record = json.loads((workdir / "results/register/model.json").read_text())
    client = MlflowClient(registry_uri(workdir))
    version = client.get_model_version("account-tax", record["version"])
    assert client.get_model_version_by_alias("account-tax", "candidate").version == version.version
    evaluation = json.loads((workdir / "results/evaluate/metrics.json").read_text())
    better = evaluation["comparison"]["shipped"].get("verdict") == "better"
    assert record["champion"]["moved"] == better
    assert ("champion" in client.get_registered_model("account-tax").aliases) == better
    run = client.get_run(record["tags"]["workflow_run_id"])
    assert version.run_id == run.info.run_id
    assert run.data.tags["register/champion_moved"] == str(better)
    # Tags link the training run, the model's content and its upload receipt.
    model = workdir / "results/train/segment-2/model"
    assert version.tags["model_sha256"] == content_sha256(model)
    info = json.loads((model / "training_info.json").read_text())
    assert version.tags["training_run_id"] == info["mlflow_run_id"]
    # The receipt of the upload in the registering run (later tests upload again).
    receipt = workdir / f"results/upload/receipts/model/{run.info.run_id}.json"
    assert version.tags["model_receipt_sha256"] == sha256_file(receipt)
    assert version.tags["model_s3_uri"].startswith(f"s3://{BUCKET}/workflow-test/")
    # This run has no review.rules: the version says so.
    assert version.tags["ledger_rules"] == "none"
    # One stored copy: the run's artifacts, which the version's source points into.
    stored = Path(version.source.removeprefix("file://"))
    assert stored.is_relative_to(workdir / "results/tracking/artifacts")
    assert (stored / "artifacts/model/adapter_model.safetensors").is_file()
    assert record["stored_bytes"] == sum(p.stat().st_size for p in stored.rglob("*") if p.is_file())
    requirements = (stored / "requirements.txt").read_text().split()
    assert "torch==2.13.0" in requirements and "mlflow==3.17.2" in requirements
    summary = (workdir / "results/register/summary.html").read_text()
    assert record["model_uri"] in summary and record["champion"]["why"] in summary
    assert "Ledger rules: none." in summary


def test_registered_model_loads_and_gives_predicts_output_on_the_test_split(trained, monkeypatch):
    """`mlflow.pyfunc.load_model` of the registered version, and the predict rule, on the raw
    test records (every cell as text) and on the new records with a malformed row."""
    workdir, config, _, server = trained
    test_records = workdir / "test-records.csv"
    columns = list(pl.read_csv(config["predict"]["inputs"]["new"], n_rows=1).columns)
    test = pl.read_parquet(workdir / "results/split/test.parquet").select(columns)
    test.with_columns(pl.all().cast(pl.String)).write_csv(test_records)
    config = config | {
        "predict": {"inputs": config["predict"]["inputs"] | {"test": str(test_records)}}
    }
    # Brought up to date together: earlier tests may have uploaded the model again.
    targets = [f"results/predict/{name}.parquet" for name in ("test", "new")]
    snakemake(workdir, *targets, "results/register/model.json", config=config, env=server.env())

    # Through the environment, as a user's shell would: a set_tracking_uri would outlive the test.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", registry_uri(workdir))
    model = mlflow.pyfunc.load_model("models:/account-tax@candidate")
    # The request's columns in the metadata, the answer's in the signature (see registry.py).
    columns = model.metadata.metadata["input_columns"]
    labels = json.loads((workdir / "results/features/label_map.json").read_text())["labels"]
    assert model.metadata.metadata["labels"] == len(labels)
    assert columns["account"] == {"type": "string", "required": False}
    assert {c["required"] for name, c in columns.items() if name != "account"} == {True}
    assert model.metadata.get_input_schema() is None
    answer = model.metadata.get_output_schema().input_names()
    assert {
        "source_row",
        "predicted_label",
        "confidence",
        "decision",
        "decision_reason",
        "reason",
    } <= set(answer)
    assert set(EVIDENCE_COLUMNS) <= set(answer)
    for name, path in (("test", test_records), ("new", config["predict"]["inputs"]["new"])):
        served = model.predict(raw_records_as_text(Path(path)))
        assert len(served) == (test.height if name == "test" else 4)
        assert_served_equals_predict(served, workdir, name)


def split(frame: pd.DataFrame) -> dict:
    """A frame as `dataframe_split` JSON (null for missing values)."""
    return json.loads(frame.to_json(orient="split", index=False))


def post(port: int, body: dict) -> tuple[int, dict]:
    """POST a JSON body to the model server; the status and the JSON answer, errors included."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/invocations",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_champion_served_over_http_equals_predict(trained):
    """`mlflow models serve -m models:/account-tax@champion --env-manager local` on 127.0.0.1:
    JSON records in (dataframe_split), the predict rule's rows out, the malformed record with
    its reject reason; bad requests (a number or a list in a cell, an unknown, missing or repeated
    column, no records, records in another of MLflow's formats) answered 400 with one short
    message and no traceback, and a good one after them; the server stopped by its PID."""
    workdir, config, *_ = trained
    client = MlflowClient(registry_uri(workdir))
    version = json.loads((workdir / "results/register/model.json").read_text())["version"]
    # The tiny model need not beat the baseline: promote it by hand, as a reviewer may.
    client.set_registered_model_alias("account-tax", "champion", version)
    (port,) = free_ports(1)
    command = [str(VENV_BIN / "mlflow"), "models", "serve", "-m", "models:/account-tax@champion"]
    command += ["--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"]
    environment = os.environ | {
        "MLFLOW_TRACKING_URI": registry_uri(workdir),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
    }
    server = subprocess.Popen(
        command,
        env=environment,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, server.stdout.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the model server did not come up"
                time.sleep(1)
        records = raw_records_as_text(Path(config["predict"]["inputs"]["new"]))
        refused = {
            "a number in a text column": (
                records.assign(amount=[12.5, *records["amount"][1:]]),
                "column 'amount', row 1: 12.5 is not text (float); send every value as a "
                "JSON string",
            ),
            "an unknown column": (records.assign(note="x"), "unknown column(s) 'note' (the model"),
            "a missing column": (records.drop(columns="vendor"), "missing column(s) 'vendor'"),
            "no records": (records.head(0), "no records"),
        }
        first = split(records.head(1))
        twice = {"columns": [*first["columns"], "memo"], "data": [[*first["data"][0], "y"]]}
        first = dict(zip(first["columns"], first["data"][0], strict=True))
        bodies = {
            what: ({"dataframe_split": split(frame)}, message)
            for what, (frame, message) in refused.items()
        } | {
            "a list in a cell": (
                {"dataframe_records": [first | {"memo": ["a", "b"]}]},
                "column 'memo', row 1: ['a', 'b'] is not text (list)",
            ),
            "a column twice": (
                {"dataframe_split": twice},
                "the request: column name(s) 'memo' appear more than once",
            ),
            "another format": ({"instances": [first]}, "send the records as a table"),
        }
        for what, (body, message) in bodies.items():
            status, answer = post(port, body)
            assert status == 400, what
            assert answer["message"].startswith(message), (what, answer)
            assert set(answer) == {"error_code", "message", "sqlstate", "error_class"}, what
            assert "Traceback" not in json.dumps(answer) and "/tmp" not in json.dumps(answer)
        # And a good request still gets its answer.
        status, answer = post(port, {"dataframe_split": split(records)})
        assert status == 200
        served = pd.DataFrame(answer["predictions"])
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert_served_equals_predict(served, workdir, "new")
    assert served.loc[served["reason"].notna(), "reason"].tolist() == [
        "unparseable number (format 1234.5) in column 'amount': 'not a number'"
    ]


def test_stage_logs_hold_whole_lines(trained):
    """Progress in a rule's log is a line every so often, never carriage-return redraws."""
    workdir, *_ = trained
    logs = sorted((workdir / "logs").rglob("*.log"))
    assert {path.parent.name for path in logs} >= {"train", "evaluate", "register", "predict"}
    for path in logs:
        assert b"\r" not in path.read_bytes(), path
    assert any("train: 100%" in path.read_text() for path in logs if path.parent.name == "train")


def test_notebook_loads_the_run_and_plots_per_class_f1(trained, monkeypatch):
    """notebooks/explore.ipynb, executed headless on the workflow's results: every cell runs,
    the review queue is the test rows below the shipped threshold, and the F1 plot is drawn."""
    import nbformat
    from nbclient import NotebookClient

    import account_tax

    workdir, *_ = trained
    monkeypatch.setenv("ACCOUNT_TAX_WORKDIR", str(workdir))
    monkeypatch.setenv("PATH", f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
    notebook = nbformat.read(REPO / "notebooks" / "explore.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute(
        cwd=str(REPO / "notebooks")
    )
    outputs = [cell.outputs for cell in notebook.cells if cell.cell_type == "code"]
    assert not [o for cell in outputs for o in cell if o.output_type == "error"]
    predictions = account_tax.load("evaluate", "test_predictions", workdir)
    threshold = account_tax.load("evaluate", workdir=workdir)["comparison"]["shipped"]["threshold"]
    below = (
        predictions.height if threshold is None else (predictions["confidence"] < threshold).sum()
    )
    printed = "".join(o.get("text", "") for o in outputs[2] if o.output_type == "stream")
    assert f"{below} of {predictions.height} test rows to review" in printed
    assert any("image/png" in o.get("data", {}) for o in outputs[3])
    runs = account_tax.runs(workdir)
    assert runs.height >= 1 and set(runs["status"]) <= {"FINISHED", "RUNNING", "FAILED"}
    assert runs["evaluate/test_macro_f1"].drop_nulls().len() >= 1


def test_no_secret_in_the_registered_model(trained):
    """Neither the S3 secret nor the sentinel MLflow token (both in every job's environment)
    reaches the registered model's files, its requirements or its version's tags."""
    workdir, _, _, server = trained
    secrets = [server.env()["AWS_SECRET_ACCESS_KEY"], *SECRETS.values()]
    record = json.loads((workdir / "results/register/model.json").read_text())
    version = MlflowClient(registry_uri(workdir)).get_model_version(
        "account-tax", record["version"]
    )
    stored = Path(version.source.removeprefix("file://"))
    files = [path for path in stored.rglob("*") if path.is_file()]
    assert stored / "requirements.txt" in files and stored / "MLmodel" in files
    for secret in secrets:
        assert secret not in json.dumps(version.tags)
        for path in files:
            assert secret.encode() not in path.read_bytes(), path


def test_a_warm_start_from_the_champion_keeps_its_ids_and_learns_the_corrections(trained, tmp_path):
    """A copy of the trained workflow, its registered version made champion, a new class in the
    chart and corrections of ten records: init_model fetches the champion's model, features keeps
    its label ids, and training starts from it on the rows it has not learned."""
    workdir, config, _, server = trained
    copy = tmp_path / "warm"
    shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns("checkpoints", ".snakemake"))
    client = MlflowClient(registry_uri(copy))
    version = client.get_model_version_by_alias("account-tax", "candidate")
    client.set_registered_model_alias("account-tax", "champion", version.version)
    corrections = copy / "corrections.csv"
    rows = [{"entry_id": f"E{n:05d}", "account": "4210"} for n in range(1, 11)]
    pl.DataFrame(rows).write_csv(corrections)
    warm = {
        **config,
        "data": {**config["data"], "classes": [*config["data"]["classes"], "2000"]},
        "train": {**config["train"], "init_from": "champion", "warm_start": {"epochs": 2}},
    }
    warm["data"]["corrections"] = [str(corrections)]
    result = snakemake(copy, "results/train/segment-2/metrics.json", config=warm, env=server.env())
    assert {"init_model", "correct", "features", "train"} <= set(jobs_run(result))

    fetched = copy / "results/init/model"
    stored = Path(version.source.removeprefix("file://")) / "artifacts/model"
    assert sha256_file(fetched / "adapter_model.safetensors") == sha256_file(
        stored / "adapter_model.safetensors"
    )
    old_labels = json.loads((fetched / "label_map.json").read_text())["labels"]
    labels = json.loads((copy / "results/features/label_map.json").read_text())["labels"]
    assert labels == [*old_labels, "2000"]

    model = copy / "results/train/segment-2/model"
    info = json.loads((model / "training_info.json").read_text())
    learned = pl.read_parquet(fetched / "trained_rows.parquet")
    split = pl.read_parquet(copy / "results/serialize/train.parquet")
    split = split.with_columns(pl.Series("label", labels).gather(split["label_id"]))
    new = split.join(learned, on=["id", "label"], how="anti")
    head_init = info["head_init"]
    assert head_init["method"] == "warm_start" and head_init["from"] == "results/init/model"
    assert head_init["new_rows"] == len(new) and head_init["new_classes"] == 1
    # New to the model: corrected records, and records the champion's own split held out (a
    # class that corrections shrank gives some back to train).
    assert set(new["id"]) & {row["entry_id"] for row in rows}
    metrics = json.loads((copy / "results/train/segment-2/metrics.json").read_text())
    assert metrics["epochs"] == 2
    assert metrics["train_rows"] == len(new) + info["head_init"]["replayed_rows"]
    # What the champion learned is kept out of validation and test, whose rows it has not seen.
    for name in ("validation", "test"):
        held_out = pl.read_parquet(copy / f"results/serialize/{name}.parquet")
        assert held_out.height > 0 and not set(held_out["id"]) & set(learned["id"])

    # The next run fetches the champion again only once the alias has moved.
    target = "results/train/segment-2/metrics.json"
    assert jobs_run(snakemake(copy, target, "-n", config=warm, env=server.env())) == {}
    moved = client.create_model_version("account-tax", version.source, version.run_id)
    client.set_registered_model_alias("account-tax", "champion", moved.version)
    planned = jobs_run(snakemake(copy, target, "-n", config=warm, env=server.env()))
    assert {"init_model", "train"} <= set(planned)
    snakemake(copy, "results/init/model", config=warm, env=server.env())
    log = (copy / "logs/init_model.log").read_text()
    assert f"champion version {moved.version} of account-tax fetched" in log


def test_an_onnx_model_that_passes_its_check_predicts_as_pytorch_does(trained, tmp_path):
    """`predict.runtime: onnx`: the export_onnx rule exports the fine-tuned model and checks it
    on the validation split against PyTorch; it passes (every suggestion the same, the calibration
    error within 0.005), so the fine-tuned candidate scores with ONNX Runtime: the same
    suggestions as with PyTorch, probabilities and evidence similarities within bf16's
    rounding."""
    workdir, config, _, server = trained
    config = config | {"predict": config["predict"] | {"runtime": "onnx"}}
    result = snakemake(workdir, "results/predict/new.parquet", config=config, env=server.env())
    assert {"export_onnx", "predict_shard", "predict"} <= set(jobs_run(result))
    folder = workdir / "results/export_onnx"
    check = json.loads((folder / "check.json").read_text())
    validation = pl.read_parquet(workdir / "results/serialize/validation.parquet")
    assert check["rows"] == validation.height and check["runtime"] == "onnx"
    assert check["top1_agreement"] == 1.0 and check["ece_change"] <= 0.005 and check["passed"]
    assert check["embedding_cosine_min"] > 0.99
    settings = complete(config)
    model, baseline = workdir / "results/train/segment-2/model", workdir / "results/baseline"
    shipped = read_shipped(workdir / "results/evaluate/metrics.json")
    outputs = []
    for onnx_model in (None, checked_onnx_model(folder)):
        candidate = Candidate(
            model,
            baseline / "model.joblib",
            dataclasses.replace(shipped, candidate="fine-tuned"),
            baseline_evidence=baseline / "evidence",
            onnx_model=onnx_model,
        )
        predictor = Predictor(
            DataSpec.from_config(settings),
            settings,
            candidate,
            Provenance("fine-tuned", "sha", None, None, None),
            k=3,
            evidence_k=3,
            chunk_rows=64,
        )
        paths = PredictPaths(*(tmp_path / f"{onnx_model}-{name}.parquet" for name in PART_FILES))
        predict_records(workdir / "ledger.csv", predictor, paths)
        outputs.append(pl.read_parquet(paths.predictions))
    with_torch, with_onnx = outputs
    for column in ("predicted_label", "top_k_labels"):
        assert with_onnx[column].to_list() == with_torch[column].to_list(), column
    assert np.allclose(with_onnx["confidence"], with_torch["confidence"], atol=2e-2)
    # The evidence: the same similarities (near-ties among the tiny model's records may swap).
    similarities = [np.stack(frame["evidence_similarities"].to_list()) for frame in outputs]
    assert np.allclose(*similarities, atol=2e-2)


def test_an_int8_onnx_model_is_smaller_and_judged_by_the_same_check(trained, tmp_path):
    workdir, *_ = trained
    model = workdir / "results/train/segment-2/model"
    exported = {runtime: tmp_path / f"{runtime}.onnx" for runtime in ("onnx", "onnx-int8")}
    for runtime, path in exported.items():
        export_onnx(model, path, runtime)
    assert exported["onnx-int8"].stat().st_size < exported["onnx"].stat().st_size
    settings = PredictSettings.of({"runtime": "onnx-int8"})
    validation = workdir / "results/serialize/validation.parquet"
    record = check_runtime(model, exported["onnx-int8"], validation, settings, 64, 1)
    assert 0 <= record["top1_agreement"] <= 1 and record["ece_change"] >= 0
    assert record["passed"] == (record["top1_agreement"] >= 0.995 and record["ece_change"] <= 0.005)
    empty = tmp_path / "validation.parquet"
    pl.read_parquet(validation).clear().write_parquet(empty)
    record = check_runtime(model, exported["onnx"], empty, settings, 64, 1)
    assert record == {"runtime": "onnx-int8", "rows": 0, "passed": False}


def test_the_review_workbook_of_the_predict_rule_filled_in_is_a_corrections_file(trained, tmp_path):
    """`predict.review_format: xlsx`: the predict rule writes the rows to review as an Excel
    workbook, the review file's columns and rows with the model's accounts to choose from. Its
    account column filled in and saved, it corrects: the records (new to the ledger) join it with
    the accounts people chose, and their suggestions make the track record. Its values are
    checked on a workbook of every prediction, as the rule writes one when none clears the
    threshold."""
    workdir, config, _, server = trained
    config = config | {"predict": config["predict"] | {"review_format": "xlsx"}}
    result = snakemake(workdir, "results/predict/new.review.xlsx", config=config, env=server.env())
    assert "predict" in jobs_run(result)
    predict, model = workdir / "results/predict", workdir / "results/train/segment-2/model"
    book = openpyxl.load_workbook(predict / "new.review.xlsx", read_only=True)
    assert book.sheetnames == ["review", "accounts"]
    rows = list(book["review"].iter_rows(values_only=True))
    assert list(rows[0]) == pl.read_parquet_schema(predict / "new.review.parquet").names()
    assert len(rows) - 1 == parquet_rows(predict / "new.review.parquet")
    label_map = json.loads((model / "label_map.json").read_text())
    listed = [row[0] for row in book["accounts"].iter_rows(min_row=2, values_only=True)]
    assert listed == label_map["labels"]
    book.close()

    review = pl.read_parquet(predict / "new.parquet").sort("confidence", "source_row")
    review.write_parquet(tmp_path / "review.parquet")
    write_review_workbook(
        tmp_path / "review.parquet", tmp_path / "review.xlsx", model / "label_map.json", 64
    )
    book = openpyxl.load_workbook(tmp_path / "review.xlsx")
    sheet = book["review"]
    header = [cell.value for cell in sheet[1]]
    assert header == review.columns
    assert [row[0] for row in sheet.iter_rows(min_row=2, values_only=True)] == review[
        "source_row"
    ].to_list()
    evidence = header.index("evidence_texts")
    assert [row[evidence] for row in sheet.iter_rows(min_row=2, values_only=True)] == [
        "\n".join(cell) for cell in review["evidence_texts"]
    ]
    chosen = ["1800", "4210", "4400", "4930"][: review.height]
    for row, account in zip(sheet.iter_rows(min_row=2), chosen, strict=True):
        row[header.index("account")].value = account
    book.save(tmp_path / "reviewed.xlsx")
    assert_reviewed_file_corrects(trained, tmp_path / "reviewed.xlsx", review, chosen, tmp_path)
