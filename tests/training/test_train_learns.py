"""Training learns: the other training tests compare runs with runs (resumed with
uninterrupted, compiled with eager, FSDP with DeepSpeed), which a bug that stopped learning would
pass alike. Here the tiny model, on a set its words separate, must end far from chance."""

import json
import math

import pytest

CLASSES_WITH_ROWS = 4  # of the label map's 5 (`unused` has none)


@pytest.mark.slow
def test_validation_loss_falls_and_accuracy_beats_chance(
    ledger, tiny_bert, tiny_settings, run_training, tmp_path
):
    settings = tiny_settings(tiny_bert, epochs=6, early_stopping={"patience": None})
    metrics = run_training(ledger, tmp_path, settings)
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    epochs = [record for record in history if record.get("validation_loss") is not None]
    assert len(epochs) == 6
    losses = [record["validation_loss"] for record in epochs]
    # Guessing among the 5 classes gives log(5) = 1.61: training ends far below it, and below
    # where its first epoch ended.
    assert losses[-1] < 0.6 * math.log(5) and losses[-1] < 0.8 * losses[0], losses
    chance = 1 / CLASSES_WITH_ROWS
    assert epochs[-1]["validation_accuracy"] >= 3 * chance, epochs[-1]
    assert metrics["validation_accuracy"] >= 3 * chance


@pytest.mark.slow
def test_validation_while_training_predicts_only_accounts_that_take_postings(
    ledger, tiny_bert, tiny_settings, run_training, tmp_path
):
    """`office` made a group account (its rows stay, the chart takes no postings on it): the
    loop's validation, which picks the exported epoch and stops early, predicts among the other
    accounts as predict does, so office's quarter of the rows can never be right."""
    label_map = json.loads(ledger["label_map"].read_text())
    label_map["postable"] = [label != "office" for label in label_map["labels"]]
    grouped = ledger | {"label_map": tmp_path / "label_map.json"}
    grouped["label_map"].write_text(json.dumps(label_map))
    settings = tiny_settings(tiny_bert, epochs=6, early_stopping={"patience": None})
    run_training(grouped, tmp_path, settings)
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    epochs = [record for record in history if record.get("validation_accuracy") is not None]
    # 9 of the 36 validation rows are office's; the others are still learned (chance: 7 of 36).
    assert max(record["validation_accuracy"] for record in epochs) <= 27 / 36
    assert epochs[-1]["validation_accuracy"] >= 16 / 36
