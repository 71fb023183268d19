"""Early stopping and the exported model: the best epoch's by the configured metric."""

import json

import numpy as np
import polars as pl
import pytest
import torch

from account_tax.errors import DataError
from account_tax.training.inference import load_classifier, predict_logits
from account_tax.training.loop import best_epoch, out_of_time, stop_reason
from account_tax.training.settings import EarlyStoppingSettings


def epochs(metric, values):
    return [{"step": 10 * (i + 1), "loss": 1.0, metric: v} for i, v in enumerate(values)]


def test_the_best_epoch_is_the_last_that_improved_by_more_than_min_delta():
    f1 = EarlyStoppingSettings.of(metric="validation_macro_f1", patience=2)
    history = epochs("validation_macro_f1", [0.5, 0.7, 0.69, 0.7])
    # Steps between epoch ends have no validation score.
    history.insert(1, {"step": 15, "loss": 0.9})
    assert best_epoch(history, f1)["step"] == 20  # a tie does not improve
    assert stop_reason(history, f1, 10) == (
        "validation_macro_f1 not better than 0.7000 (step 20) by more than 0.0 for 2 epoch(s)"
    )
    assert stop_reason(history[:-1], f1, 10) is None
    # A model validated within an epoch, where the time budget ran out, is no epoch: a resume
    # with a larger budget goes on.
    spent = [*history[:-1], {"step": 33, "loss": 1.0, "validation_macro_f1": 0.69}]
    assert stop_reason(spent, f1, 10) is None
    strict = EarlyStoppingSettings.of(metric="validation_macro_f1", patience=2, min_delta=0.25)
    assert best_epoch(history, strict)["step"] == 10
    loss = EarlyStoppingSettings.of(metric="validation_loss", patience=1)
    history = epochs("validation_loss", [0.9, 0.5, 0.6])
    assert best_epoch(history, loss)["step"] == 20
    assert stop_reason(history, loss, 10) is not None
    unlimited = EarlyStoppingSettings.of(metric="validation_loss", patience=None)
    assert stop_reason(history, unlimited, 10) is None
    assert best_epoch([{"step": 1, "loss": 1.0}], loss) is None


def test_the_time_budget_counts_training_and_validation_seconds():
    history = [
        {"step": 1, "seconds": 20.0},
        {"step": 2, "seconds": 20.0, "validation_seconds": 15.0},
    ]
    assert out_of_time(history, None) is None
    assert out_of_time(history, 1.0) is None
    history.append({"step": 3, "seconds": 5.0})
    assert out_of_time(history, 1.0) == "the time budget of 1 min is spent (1.0 min)"


def test_an_unknown_metric_is_refused():
    with pytest.raises(DataError, match=r"`train\.early_stopping\.metric`: 'f1' is not one of"):
        EarlyStoppingSettings.of(metric="f1")


@pytest.mark.parametrize("epochs", [4, 2])
def test_training_stops_early_and_exports_the_best_epoch(
    ledger, tiny_bert, tiny_settings, run_training, tmp_path, epochs
):
    """A min_delta no score can reach: the first epoch stays best, training stops after
    `patience` more (unless that is the last epoch anyway), and the exported model is the
    first epoch's checkpoint."""
    early_stopping = {"metric": "validation_accuracy", "patience": 1, "min_delta": 2.0}
    settings = tiny_settings(tiny_bert, epochs=epochs, early_stopping=early_stopping)
    metrics = run_training(ledger, tmp_path, settings)

    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    ends = [r for r in history if "validation_accuracy" in r]
    assert len(ends) == 2 and metrics["steps"] == ends[-1]["step"]
    assert metrics["stopped_early"] is (epochs > 2) and metrics["epochs_run"] == 2
    assert metrics["exported_step"] == ends[0]["step"]
    assert metrics["validation_accuracy"] == ends[0]["validation_accuracy"]
    info = json.loads((tmp_path / "model" / "training_info.json").read_text())
    assert info["exported"]["step"] == ends[0]["step"]
    if epochs > 2:
        assert info["exported"]["stopped"].startswith("validation_accuracy not better than")
    else:
        assert info["exported"]["stopped"] == "every epoch ran"
    # The exported weights score the validation split as the first epoch's did.
    model, tokenizer, _ = load_classifier(tmp_path / "model", dtype=torch.float32)
    validation = pl.read_parquet(ledger["validation"])
    logits = predict_logits(model, tokenizer, validation["text"].to_list(), max_length=48)
    accuracy = float(np.mean(logits.argmax(axis=1) == validation["label_id"].to_numpy()))
    assert accuracy == pytest.approx(ends[0]["validation_accuracy"])


def test_a_spent_time_budget_exports_the_model_where_it_stands_and_a_larger_one_goes_on(
    ledger, tiny_bert, tiny_settings, run_training, tmp_path
):
    """A budget spent by the first step: that step is validated, saved and exported. The budget
    is no part of the checkpoint's identity, so a run without one resumes there and trains to
    the end, at the constant rate after its (empty) warm-up."""
    settings = tiny_settings(
        tiny_bert, epochs=3, lr_schedule="constant", warmup_ratio=0.0, max_minutes=1e-6
    )
    metrics = run_training(ledger, tmp_path, settings)

    assert metrics["steps"] == 1 and metrics["exported_step"] == 1
    assert metrics["stopped"].startswith("the time budget of 1e-06 min is spent")
    first = json.loads((tmp_path / "history.jsonl").read_text())
    assert first["validation_accuracy"] == metrics["validation_accuracy"]
    assert first["validation_seconds"] > 0

    metrics = run_training(ledger, tmp_path, settings | {"max_minutes": None})

    assert metrics["resumed_from_step"] == 1 and metrics["stopped"] == "every epoch ran"
    assert metrics["steps"] == metrics["total_steps"] > 1
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in history] == list(range(1, metrics["steps"] + 1))
    assert {(r["lr"], r["head_lr"]) for r in history} == {(0.01, 0.01)}
