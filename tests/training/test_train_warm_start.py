"""Warm start (train.init_from): a new run begins from an exported model, keeps its label ids,
head rows and adapter, adds rows for new classes, and trains on what that model has not learned
plus a replay of what it has."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from conftest import LABELS, REPO, ledger_rows

from account_tax.data.split import TRAINED_ROWS
from account_tax.errors import DataError
from account_tax.training.evidence import INDEX_DIR, EvidenceIndex, unit_rows
from account_tax.training.head_init import trained_head
from account_tax.training.inference import load_classifier, predict_logits
from account_tax.training.loss import class_weights, label_counts
from account_tax.training.model import build_model, prepare_for_training
from account_tax.training.model_index import DRIFT_SAMPLE, build_model_index
from account_tax.training.settings import TrainSettings
from account_tax.training.warm_start import (
    InitModel,
    check_label_ids,
    copy_head_rows,
    head_state,
    load_adapter,
    read_init_model,
    rows_to_learn,
    warm_start_settings,
)

NEW_LABELS = [*LABELS, "meals"]
SCHEMA = {"id": pl.String, "text": pl.String, "label_id": pl.Int32}


def init_of(trained: list[tuple[str, str]], labels=LABELS) -> InitModel:
    frame = pl.DataFrame(trained, schema={"id": pl.String, "label": pl.String}, orient="row")
    return InitModel(Path("old-model"), list(labels), frame)


def test_the_rows_to_learn_are_the_new_and_relabelled_ones_plus_a_seeded_replay():
    split = pl.DataFrame(
        {
            "id": [f"r{i}" for i in range(10)],
            "text": ["t"] * 10,
            "label_id": [0, 1, 2, 3, 0, 1, 2, 3, 5, 1],
        },
        schema=SCHEMA,
    )
    # r0..r7 learned with these labels, r9 learned as office (now travel: a correction), r8 new.
    old = [(f"r{i}", NEW_LABELS[split["label_id"][i]]) for i in range(8)] + [("r9", "office")]
    chosen, counts = rows_to_learn(split, NEW_LABELS, init_of(old), replay_ratio=1.5, seed=3)
    assert counts == {"new_rows": 2, "learned_rows": 8, "replayed_rows": 3}
    ids = chosen["id"].to_list()
    assert {"r8", "r9"} <= set(ids) and len(ids) == 5
    assert ids == sorted(ids, key=lambda i: int(i[1:]))  # the split's order
    again, _ = rows_to_learn(split, NEW_LABELS, init_of(old), replay_ratio=1.5, seed=3)
    assert again.equals(chosen)
    everything, counts = rows_to_learn(split, NEW_LABELS, init_of(old), replay_ratio=50, seed=3)
    assert counts["replayed_rows"] == 8 and len(everything) == 10
    none, counts = rows_to_learn(split, NEW_LABELS, init_of(old), replay_ratio=0, seed=3)
    assert none["id"].to_list() == ["r8", "r9"]


def test_label_ids_of_the_old_model_must_come_first_in_its_order(tmp_path):
    check_label_ids(init_of([]), NEW_LABELS, tmp_path / "label_map.json")
    with pytest.raises(DataError, match=r"label_map.json: its first 5 labels are not old-model's"):
        check_label_ids(init_of([]), ["meals", *LABELS], tmp_path / "label_map.json")


@pytest.fixture(scope="module")
def old_model(tmp_path_factory, ledger, tiny_bert, tiny_settings, run_training) -> Path:
    out = tmp_path_factory.mktemp("old")
    run_training(ledger, out, tiny_settings(tiny_bert, epochs=1, head="linear"))
    return out / "model"


@pytest.fixture(scope="module")
def grown_ledger(tmp_path_factory, ledger) -> dict[str, Path]:
    """The old training rows with one relabelled, 24 rows of a new class, the old validation rows
    and a label map with the new class after the old ones."""
    folder = tmp_path_factory.mktemp("grown")
    old = pl.read_parquet(ledger["train"])
    relabelled = old.with_columns(
        pl.when(pl.col("id") == old["id"][0])
        .then(1)
        .otherwise(pl.col("label_id"))
        .alias("label_id")
    )
    meals = pl.DataFrame(
        [
            {
                "id": f"m{i}",
                "text": f"vendor: city estates | memo: desk chair | amount: {i}",
                "label_id": 5,
            }
            for i in range(24)
        ],
        schema=SCHEMA,
    )
    paths = {"train": folder / "train.parquet", "validation": ledger["validation"]}
    pl.concat([relabelled.cast(SCHEMA), meals]).write_parquet(paths["train"])
    counts = {label: 40 for label in LABELS[:4]} | {"unused": 0, "meals": 24}
    paths["label_map"] = folder / "label_map.json"
    paths["label_map"].write_text(
        json.dumps({"label_column": "label", "labels": NEW_LABELS, "counts": counts}),
        encoding="utf-8",
    )
    return paths


def test_a_warm_model_starts_where_the_old_one_ended(old_model, tiny_bert, tiny_settings):
    """Before any step, the warm-started model gives the old model's logits for the old classes:
    same adapter, same head rows; the new class's row is its text as that model embeds it."""
    settings = TrainSettings.of(tiny_settings(tiny_bert, head="linear"), init_from=str(old_model))
    init = read_init_model(old_model, settings)
    model = build_model(tiny_bert, NEW_LABELS, "linear")
    head, adapter = head_state(init)
    copy_head_rows(model, head, len(LABELS))
    model = prepare_for_training(model, settings.lora, gradient_checkpointing=False).eval()
    load_adapter(model, adapter, old_model)
    old, tokenizer, _ = load_classifier(old_model, dtype=torch.float32)
    texts = [row["text"] for row in ledger_rows(12, seed=7)]
    expected = predict_logits(old, tokenizer, texts, max_length=48)
    warm = predict_logits(model, tokenizer, texts, max_length=48)
    assert warm.shape == (12, len(NEW_LABELS))
    np.testing.assert_allclose(warm[:, : len(LABELS)], expected, atol=1e-5)
    rows = trained_head(model).weight.detach()
    assert torch.equal(rows[: len(LABELS)], head["weight"])


def train_warm(train_command, ledger, out: Path, settings: dict, init: Path):
    """scripts/train.py from `init`, as the workflow runs it; the finished process."""
    command, env = train_command(ledger, out, settings, None)
    return subprocess.run(
        [*command, "--init-model", str(init)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_warm_start_trains_on_new_rows_and_a_replay_and_records_what_it_learned(
    tmp_path, old_model, grown_ledger, tiny_bert, tiny_settings, train_command
):
    settings = tiny_settings(
        tiny_bert,
        head="linear",
        init_from=str(old_model),
        warm_start={"epochs": 1, "replay_ratio": 0.5, "learning_rate_factor": 0.5},
    )
    done = train_warm(train_command, grown_ledger, tmp_path, settings, old_model)
    assert done.returncode == 0, done.stderr[-4000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    # Both peak rates (0.01) halved: the adapters' and the head's.
    assert max(record["lr"] for record in history) == pytest.approx(0.005)
    assert max(record["head_lr"] for record in history) == pytest.approx(0.005)
    info = json.loads((tmp_path / "model" / "training_info.json").read_text())
    # 24 rows of the new class and one relabelled row are new; half as many old ones replayed.
    assert info["head_init"]["method"] == "warm_start"
    assert info["head_init"]["new_rows"] == 25
    assert info["head_init"]["replayed_rows"] == 12
    assert info["head_init"]["new_classes"] == 1
    assert metrics["train_rows"] == 37 and metrics["epochs"] == 1
    learned = pl.read_parquet(tmp_path / "model" / TRAINED_ROWS)
    old_learned = pl.read_parquet(old_model / TRAINED_ROWS)
    assert len(old_learned) == 160 and len(learned) == 184
    first = pl.read_parquet(grown_ledger["train"])["id"][0]
    assert learned.filter(pl.col("id") == first)["label"].to_list() == ["travel"]
    assert json.loads((tmp_path / "model" / "label_map.json").read_text())["labels"] == NEW_LABELS
    # The evidence index looked at how far the encoder moved since the old model's index, which
    # holds the 160 old training records (validation records are always embedded again).
    assert 0 < metrics["evidence_index_drift_cosine"] <= 1
    assert metrics["evidence_index_carried_rows"] in (0, 160 - DRIFT_SAMPLE)


def test_a_warm_start_carries_the_old_index_only_while_the_encoder_has_barely_moved(
    tmp_path, old_model, ledger
):
    """The old index's vectors, moved a little (as a short warm start moves the encoder), are
    kept for every training record it holds with the same text but the sample embedded again;
    moved far, or at reuse_index_min_cosine 1, every record is embedded again. A record whose
    text changed and the validation records are always embedded again."""
    splits = {"train": tmp_path / "train.parquet", "validation": ledger["validation"]}
    train = pl.read_parquet(ledger["train"])
    edited = train["id"][5]
    train.with_columns(
        pl.when(pl.col("id") == edited)
        .then(pl.lit("vendor: new name | memo: office rent"))
        .otherwise(pl.col("text"))
        .alias("text")
    ).write_parquet(splits["train"])
    model = tmp_path / "model"
    shutil.copytree(old_model, model)
    build_model_index(model, splits)
    fresh = EvidenceIndex.read(model / INDEX_DIR)
    old = EvidenceIndex.read(old_model / INDEX_DIR)
    rng = np.random.default_rng(0)

    def previous_moved_by(scale: float) -> Path:
        folder = tmp_path / f"previous-{scale}"
        noise = rng.normal(size=old.vectors.shape).astype(np.float32)
        EvidenceIndex(unit_rows(old.vectors + scale * noise), old.records).write(folder / INDEX_DIR)
        return folder

    near = previous_moved_by(0.01)
    cost = build_model_index(model, splits, carried=near, reuse_min_cosine=0.99, seed=3)
    carried = EvidenceIndex.read(model / INDEX_DIR)
    stored = EvidenceIndex.read(near / INDEX_DIR).vectors
    same = (np.abs(carried.vectors - stored) < 1e-6).all(axis=1)
    embedded = (np.abs(carried.vectors - fresh.vectors) < 2e-3).all(axis=1)
    kept = len(train) - 1 - DRIFT_SAMPLE
    assert cost["evidence_index_carried_rows"] == kept
    assert 0.99 <= cost["evidence_index_drift_cosine"] < 1
    assert same.sum() == kept and embedded.sum() == DRIFT_SAMPLE + 1 + 36
    assert embedded[carried.records["id"].to_list().index(edited)]
    assert embedded[(carried.records["split"] == "validation").to_numpy()].all()
    assert (carried.records["id"] == fresh.records["id"]).all()

    for previous, threshold in ((previous_moved_by(1.0), 0.99), (near, 1.0)):
        cost = build_model_index(model, splits, carried=previous, reuse_min_cosine=threshold)
        assert cost["evidence_index_carried_rows"] == 0
        np.testing.assert_allclose(EvidenceIndex.read(model / INDEX_DIR).vectors, fresh.vectors)


def test_a_warm_start_trains_its_own_epochs_at_scaled_down_rates(tiny_bert, tiny_settings):
    settings = TrainSettings.of(
        tiny_settings(
            tiny_bert,
            learning_rate=0.002,
            head_learning_rate=0.02,
            warm_start={"epochs": 3, "learning_rate_factor": 0.1},
        )
    )
    many = {"new_rows": 5, "learned_rows": 100}
    warm = warm_start_settings(settings, many)
    assert (warm.epochs, warm.learning_rate, warm.head_learning_rate) == pytest.approx(
        (3, 0.0002, 0.002)
    )
    # Without a head rate of its own the head takes the adapters' rate, scaled with it.
    no_head_rate = TrainSettings.of(tiny_settings(tiny_bert, head_learning_rate=None))
    assert warm_start_settings(no_head_rate, many).head_learning_rate is None


@pytest.mark.parametrize(
    ("new_rows", "one_epoch_below", "epochs"),
    [(4, 0.05, 1), (5, 0.05, 3), (40, 0.05, 3), (1, 0.0, 3)],
)
def test_a_warm_start_with_few_new_rows_next_to_the_learned_ones_makes_one_pass(
    tiny_bert, tiny_settings, new_rows, one_epoch_below, epochs
):
    """Under `one_epoch_below` times the learned rows, one epoch; from there on, `epochs`; at
    0, always `epochs`. The rates are scaled either way."""
    warm_start = {"epochs": 3, "learning_rate_factor": 0.1, "one_epoch_below": one_epoch_below}
    settings = TrainSettings.of(
        tiny_settings(tiny_bert, learning_rate=0.002, warm_start=warm_start)
    )
    warm = warm_start_settings(settings, {"new_rows": new_rows, "learned_rows": 100})
    assert warm.epochs == epochs
    assert warm.learning_rate == pytest.approx(0.0002)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"head": "cosine"}, r"train.head"),
        ({"lora": {"enabled": True, "r": 2}}, r"train.lora.r"),
        ({"lora": {"enabled": True, "r": 4, "alpha": 16}}, r"train.lora.alpha"),
    ],
)
def test_a_model_trained_otherwise_is_refused(old_model, tiny_bert, tiny_settings, change, named):
    settings = TrainSettings.of(tiny_settings(tiny_bert, head="linear") | change)
    with pytest.raises(DataError, match=rf"{old_model}: trained with other .*{named}"):
        read_init_model(old_model, settings)


def test_a_model_trained_on_other_base_files_is_refused(
    old_model, tiny_bert, tiny_settings, tmp_path
):
    """The adapter and head were trained on the base model's files as they were: where the
    files at `train.model` differ now (another revision at the same path), neither a warm start
    nor inference goes on with them."""
    moved = shutil.copytree(old_model, tmp_path / "model")
    settings = TrainSettings.of(tiny_settings(tiny_bert, head="linear"))
    # Copied elsewhere, the model is the same: where it lies is no part of it.
    assert read_init_model(moved, settings).folder == moved
    load_classifier(moved, dtype=torch.float32)
    info = json.loads((moved / "training_info.json").read_text())
    assert len(info["base_model_sha256"]) == 64
    info["base_model_sha256"] = "0" * 64
    (moved / "training_info.json").write_text(json.dumps(info))
    with pytest.raises(DataError, match=rf"{moved}: trained on the files of {tiny_bert} as"):
        read_init_model(moved, settings)
    with pytest.raises(DataError, match=rf"{moved}: its adapter was trained on the files of"):
        load_classifier(moved, dtype=torch.float32)


SETUP = r"""
import json, sys
from pathlib import Path
from account_tax.training.loop import TrainPaths, setup
from account_tax.training.settings import TrainSettings
settings, ledger, out, init = json.loads(sys.argv[1]), json.loads(sys.argv[2]), *sys.argv[3:]
out = Path(out)
paths = TrainPaths(
    train=Path(ledger["train"]), validation=Path(ledger["validation"]),
    label_map=Path(ledger["label_map"]), checkpoint_dir=out / "checkpoints",
    output_dir=out / "model", metrics=out / "metrics.json", history=out / "history.jsonl",
    init_model=Path(init),
)
run = setup(TrainSettings.of(settings), paths, None)
print(json.dumps({"weights": run.weights.tolist(), "rows": len(run.train_split)}))
"""


def test_a_warm_starts_class_weights_are_the_train_splits(
    tmp_path, old_model, grown_ledger, tiny_bert, tiny_settings, train_command
):
    """A warm start trains on its new rows and a replay of a few old ones, in which some old
    classes have no row: the loss still weighs each class by its count in the train split, as
    `train.class_weight_alpha` says, not by the part drawn."""
    settings = tiny_settings(
        tiny_bert, head="linear", init_from=str(old_model), warm_start={"replay_ratio": 0.05}
    )
    _, env = train_command(grown_ledger, tmp_path, settings, None)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SETUP,
            json.dumps(settings),
            json.dumps({k: str(v) for k, v in grown_ledger.items()}),
            tmp_path,
            old_model,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    train = pl.read_parquet(grown_ledger["train"])
    num_labels = len(json.loads(Path(grown_ledger["label_map"]).read_text())["labels"])
    counts = label_counts(train["label_id"].to_numpy(), num_labels)
    assert run["rows"] < train.height
    alpha = TrainSettings.of(settings).class_weight_alpha
    assert run["weights"] == pytest.approx(class_weights(counts, alpha).tolist())


def test_a_folder_that_is_no_exported_model_is_refused(tmp_path, tiny_bert, tiny_settings):
    settings = TrainSettings.of(tiny_settings(tiny_bert))
    with pytest.raises(DataError, match=r"not a model this workflow exported"):
        read_init_model(tmp_path, settings)


def test_a_warm_start_with_nothing_new_to_learn_says_so(
    tmp_path, old_model, ledger, tiny_bert, tiny_settings, train_command
):
    settings = tiny_settings(tiny_bert, head="linear", init_from=str(old_model))
    done = train_warm(train_command, ledger, tmp_path, settings, old_model)
    assert done.returncode != 0
    assert f"{ledger['train']}: {old_model} has learned every row with its label" in done.stderr
