"""scripts/train.py end to end on the tiny models: DeepSpeed on CPU with gloo, in one process
without a launcher and in two under torchrun, killed and resumed."""

import contextlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from safetensors.torch import load_file

from account_tax.cpu_time import children_cpu_seconds
from account_tax.io import sha256_file
from account_tax.training.inference import load_classifier, predict_probabilities
from account_tax.training.loop import segment_end
from account_tax.training.loss import class_weights, label_counts

REPO = Path(__file__).resolve().parents[2]
# Wall-clock measurements; everything else must repeat exactly.
VOLATILE = {"samples_per_s", "seconds", "validation_seconds"}


def read_history(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in VOLATILE} for line in lines]


def descendants(pid):
    """Every process below `pid`, from the parent ids in /proc."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue  # ended meanwhile
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, pending = [], [pid]
    while pending:
        below = children.get(pending.pop(), [])
        found += below
        pending += below
    return found


def alive(pid):
    """Running, not ended or a zombie waiting to be reaped by someone other than us."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_after_checkpoint(command, env, run_root, step, log):
    """Start a run, wait for the manifest of checkpoint `step`, then SIGKILL every process of it,
    as a node failure would. torchrun starts each worker in a session of its own, so killing the
    launcher's process group alone would leave the workers training."""
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=log, stderr=log, start_new_session=True
    )
    deadline = time.monotonic() + 240
    try:
        while not list(run_root.glob(f"run-*/step-{step:09d}/manifest.json")):
            assert process.poll() is None, f"run ended before checkpoint {step}, see {log.name}"
            assert time.monotonic() < deadline, f"no checkpoint {step} in time, see {log.name}"
            time.sleep(0.01)
    finally:
        workers = descendants(process.pid)
        for group in [*workers, process.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        process.wait()
        while any(alive(pid) for pid in workers):
            time.sleep(0.01)
    assert len(workers) >= 2, "expected the launcher's two workers"


@pytest.mark.slow
# ZeRO-3's checkpoint is resumed on another process count below.
@pytest.mark.parametrize(("backend", "zero"), [("deepspeed", 2), ("fsdp", None)])
def test_two_processes_killed_and_resumed_end_as_an_uninterrupted_run(
    ledger, tiny_bert, tiny_settings, run_training, train_command, tmp_path, backend, zero
):
    settings = tiny_settings(
        tiny_bert,
        epochs=3,
        gradient_accumulation_steps=2,
        backend=backend,
        deepspeed_config=str(REPO / "config" / "deepspeed" / f"zero{zero or 2}.json"),
    )
    cpu_before = children_cpu_seconds()
    reference = run_training(ledger, tmp_path / "reference", settings, processes=2)
    # Both ranks' CPU, as the kernel counted the whole launch (the launcher's own a small part):
    # rank 0's alone would be under half of it.
    launch_cpu = children_cpu_seconds() - cpu_before
    assert 0.6 * launch_cpu <= reference["cpu_seconds"] <= launch_cpu

    out = tmp_path / "interrupted"
    command, env = train_command(ledger, out, settings, 2)
    with (tmp_path / "killed.log").open("w") as log:
        kill_after_checkpoint(command, env, out / "checkpoints", 4, log)
    assert not (out / "metrics.json").exists()
    resumed = run_training(ledger, out, settings, processes=2)

    # 160 rows, batches of 8, 2 processes, 2 micro-batches per step: 5 steps an epoch.
    assert reference["steps"] == resumed["steps"] == 15
    assert reference["world_size"] == 2 and reference["resumed_from_step"] == 0
    assert 4 <= resumed["resumed_from_step"] < 15
    for key in ("train_loss", "validation_loss", "validation_accuracy"):
        assert resumed[key] == reference[key], key
    assert read_history(out / "history.jsonl") == read_history(tmp_path / "reference/history.jsonl")
    trained = load_file(out / "model" / "adapter_model.safetensors")
    expected = load_file(tmp_path / "reference" / "model" / "adapter_model.safetensors")
    assert trained.keys() == expected.keys()
    assert all(torch.equal(trained[name], expected[name]) for name in expected)

    run_dir = next((out / "checkpoints").glob("run-*"))
    # Every 4 steps and at each epoch end (5 steps); none deleted: that is retention's job.
    assert [p.name for p in sorted(run_dir.iterdir())] == [
        f"step-{step:09d}" for step in (4, 5, 8, 10, 12, 15)
    ]
    final = json.loads((run_dir / "step-000000015" / "manifest.json").read_text())
    assert final["step"] == 15 and final["epoch"] == 3.0
    last_epoch = read_history(out / "history.jsonl")[-1]
    assert final["metrics"]["validation_accuracy"] == last_epoch["validation_accuracy"]
    # The exported model is the best epoch's (train.early_stopping), whichever that was.
    exported = json.loads((out / "model" / "training_info.json").read_text())["exported"]
    best = json.loads((run_dir / f"step-{exported['step']:09d}" / "manifest.json").read_text())
    assert best["metrics"]["validation_accuracy"] == reference["validation_accuracy"]
    assert {"rng_state_rank0.pt", "rng_state_rank1.pt", "history.jsonl"} <= final["files"].keys()
    # Both ranks hashed a share of the files; together they sealed every one.
    sealed = run_dir / "step-000000015"
    assert final["files"] == {
        path.relative_to(sealed).as_posix(): sha256_file(path)
        for path in sealed.rglob("*")
        if path.is_file() and path.name != "manifest.json"
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model_name", "lora", "processes"),
    [("tiny_bert_without_dropout", True, 2), ("tiny_llama", False, None)],
    ids=["encoder-lora", "decoder-full"],
)
def test_both_backends_train_the_same_steps_to_the_same_losses(
    request, ledger, tiny_settings, run_training, tmp_path, model_name, lora, processes
):
    """The same loop, loss, optimizer (AdamW, weight decay by group, clipping) and schedule under
    DeepSpeed and FSDP, on one process and on two (each holding a shard of every gradient), for
    an encoder and a decoder (FSDP's units are their layers): without dropout (the tiny Llama
    has none), the same losses step for step, within the rounding of summing in another order.
    The gradients are clipped at every step, so the norm over the shards counts too."""
    ds_config = json.loads((REPO / "config" / "deepspeed" / "zero2.json").read_text())
    ds_config["gradient_clipping"] = 0.05
    (tmp_path / "clipped.json").write_text(json.dumps(ds_config))
    settings = tiny_settings(
        request.getfixturevalue(model_name),
        epochs=2,
        gradient_accumulation_steps=2 if processes is None else 1,
        lora={"enabled": lora, "r": 4, "alpha": 8, "dropout": 0.0},
        learning_rate=0.01 if lora else 1e-3,
        deepspeed_config=str(tmp_path / "clipped.json"),
    )
    histories = {}
    for backend in ("deepspeed", "fsdp"):
        out = tmp_path / backend
        run_training(ledger, out, settings | {"backend": backend}, processes=processes)
        histories[backend] = read_history(out / "history.jsonl")
    ours, theirs = histories["deepspeed"], histories["fsdp"]
    assert len(ours) == len(theirs) == 20  # 160 rows, 16 a step, 2 epochs
    assert [r["lr"] for r in ours] == [r["lr"] for r in theirs]
    np.testing.assert_allclose([r["loss"] for r in theirs], [r["loss"] for r in ours], rtol=1e-4)
    for key in ("validation_loss", "validation_accuracy"):
        np.testing.assert_allclose(theirs[-1][key], ours[-1][key], rtol=1e-4)


def test_one_process_without_launcher_decoder_zero3_and_inference(
    ledger, tiny_llama, tiny_settings, run_training, tmp_path
):
    settings = tiny_settings(
        tiny_llama,
        epochs=1,
        deepspeed_config="config/deepspeed/zero3.json",
        gradient_checkpointing=True,
        merge_adapter=True,
        head_learning_rate=0.03,
        dataloader={"num_workers": 1, "timeout_s": 60, "first_batch_timeout_s": 120},
    )
    metrics = run_training(ledger, tmp_path, settings)

    assert metrics["steps"] == 20 and metrics["world_size"] == 1
    assert metrics["precision"] == "fp32"
    assert metrics["train_samples_per_s"] > 0 and metrics["train_tokens_per_s"] > 0
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in history] == list(range(1, 21))
    assert {"step", "epoch", "loss", "lr", "head_lr", "samples_per_s"} <= history[0].keys()
    # DeepSpeed's optimizer keeps the head's own rate through warm-up and decay.
    assert all(r["head_lr"] == pytest.approx(3 * r["lr"]) for r in history)
    assert max(r["head_lr"] for r in history) > 0.02
    model_dir = tmp_path / "model"
    info = json.loads((model_dir / "training_info.json").read_text())
    assert info["base_model"] == str(tiny_llama) and info["settings"]["lora"]["r"] == 4

    # The inference helper sees what training's evaluation saw.
    validation = pl.read_parquet(ledger["validation"])
    texts, labels = validation["text"].to_list(), validation["label_id"].to_numpy()
    model, tokenizer, names = load_classifier(model_dir, dtype=torch.float32)
    assert not model.training and len(names) == 5
    probabilities = predict_probabilities(model, tokenizer, texts, batch_size=5, max_length=48)
    assert probabilities.shape == (len(texts), 5)
    assert np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    accuracy = float((probabilities.argmax(axis=1) == labels).mean())
    assert accuracy == pytest.approx(metrics["validation_accuracy"])
    train_labels = pl.read_parquet(ledger["train"])["label_id"].to_numpy()
    weights = class_weights(label_counts(train_labels, 5), 0.4).numpy()[labels]
    nll = -np.log(probabilities[np.arange(len(labels)), labels])
    assert (weights * nll).sum() / weights.sum() == pytest.approx(metrics["validation_loss"], 1e-4)

    backwards = predict_probabilities(model, tokenizer, texts[::-1], batch_size=7, max_length=48)
    assert np.allclose(backwards[::-1], probabilities, atol=1e-6)

    merged_dir = model_dir / "merged"
    assert not (merged_dir / "adapter_config.json").exists()
    merged, merged_tokenizer, _ = load_classifier(merged_dir, dtype=torch.float32)
    merged_probabilities = predict_probabilities(merged, merged_tokenizer, texts, 5, 48)
    assert np.allclose(merged_probabilities, probabilities, atol=1e-5)


@pytest.mark.parametrize("backend", ["deepspeed", "fsdp"])
def test_full_fine_tuning_without_validation_rows_saves_the_whole_model(
    ledger, tiny_bert, tiny_settings, run_training, tmp_path, backend
):
    """Also split.validation_fraction 0: an empty validation split, no validation metrics."""
    empty = tmp_path / "validation.parquet"
    pl.read_parquet(ledger["validation"]).clear().write_parquet(empty)
    settings = tiny_settings(
        tiny_bert, epochs=1, lora={"enabled": False}, learning_rate=1e-3, backend=backend
    )
    metrics = run_training(ledger | {"validation": empty}, tmp_path, settings)

    model_dir = tmp_path / "model"
    assert metrics["steps"] == 20
    assert metrics["validation_loss"] is None and metrics["validation_accuracy"] is None
    assert (model_dir / "model.safetensors").is_file()
    assert (model_dir / "classifier.safetensors").is_file()
    assert not (model_dir / "adapter_config.json").exists()
    trained = load_file(model_dir / "model.safetensors")
    base = load_file(tiny_bert / "model.safetensors")
    embedding = "embeddings.word_embeddings.weight"
    assert not torch.equal(trained[embedding], base[embedding])
    model, tokenizer, _ = load_classifier(model_dir, dtype=torch.float32)
    assert predict_probabilities(model, tokenizer, ["memo rent"]).shape == (1, 5)


@pytest.mark.slow
def test_segments_stop_at_a_checkpoint_and_end_as_an_uninterrupted_run(
    ledger, tiny_bert, tiny_settings, run_training, train_command, tmp_path
):
    settings = tiny_settings(tiny_bert, epochs=2, segments=3)
    reference = run_training(ledger, tmp_path / "reference", settings)

    out = tmp_path / "segmented"
    command, env = train_command(ledger, out, settings, None, segment=1)
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
    marker = json.loads((out / "segment-1" / "marker.json").read_text())
    # 160 rows in batches of 8: 20 steps an epoch, 40 in all; segment 1 of 3 ends at step 14.
    assert {k: marker[k] for k in ("segment", "segments", "step", "total_steps")} == {
        "segment": 1,
        "segments": 3,
        "step": 14,
        "total_steps": 40,
    }
    assert (Path(marker["run_dir"]) / "step-000000014" / "manifest.json").is_file()
    # The segment exported the model it reached (no epoch evaluated yet), sealed for upload.
    first = json.loads((out / "segment-1" / "metrics.json").read_text())
    assert {k: first[k] for k in ("steps", "total_steps", "exported_step", "stopped")} == {
        "steps": 14,
        "total_steps": 40,
        "exported_step": 14,
        "stopped": "the segment's end",
    }
    assert first["stopped_early"] is False and first["validation_loss"] is None
    assert len(read_history(out / "segment-1" / "history.jsonl")) == 14
    assert (out / "segment-1" / "model" / "manifest.json").is_file()

    resumed = run_training(ledger, out, settings)  # the last segment: no --segment, to the end
    assert resumed["resumed_from_step"] == 14 and resumed["stopped"] == "every epoch ran"
    for key in ("steps", "train_loss", "validation_loss", "validation_accuracy"):
        assert resumed[key] == reference[key], key


def test_segment_ends():
    assert [segment_end(40, s, 3) for s in (1, 2, 3)] == [14, 27, 40]
    assert segment_end(40, None, 3) == 40
    with pytest.raises(ValueError, match=r"segment 4 is not one of 1\.\.3"):
        segment_end(40, 4, 3)


@pytest.mark.slow
# Each checkpoint form both ways: DeepSpeed's ZeRO-2 file written by two processes read by one,
# ZeRO-3's the other way, FSDP's distributed checkpoint both ways.
@pytest.mark.parametrize(
    ("first", "then", "backend", "zero"),
    [
        (2, None, "deepspeed", 2),
        (None, 2, "deepspeed", 3),
        (2, None, "fsdp", None),
        (None, 2, "fsdp", None),
    ],
)
def test_a_run_resumes_on_another_number_of_processes_keeping_the_global_batch(
    ledger,
    tiny_bert,
    tiny_settings,
    run_training,
    train_command,
    tmp_path,
    first,
    then,
    backend,
    zero,
):
    """2 → 1 and 1 → 2 processes (None: one, without a launcher). Without dropout the only
    difference from an uninterrupted run is the order in which gradients are summed."""
    accumulation = 1 if first == 2 else 2  # a global batch of 16 either way
    model = tmp_path / "tiny-bert-without-dropout"
    shutil.copytree(tiny_bert, model)
    config = json.loads((model / "config.json").read_text())
    config |= {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    (model / "config.json").write_text(json.dumps(config))
    settings = tiny_settings(
        model,
        epochs=2,
        segments=2,
        gradient_accumulation_steps=accumulation,
        lora={"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0},
        backend=backend,
        deepspeed_config=str(REPO / "config" / "deepspeed" / f"zero{zero or 2}.json"),
    )
    reference = run_training(ledger, tmp_path / "reference", settings, processes=first)

    out = tmp_path / "resumed"
    command, env = train_command(ledger, out, settings, first, segment=1)
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
    run_dir = Path(json.loads((out / "segment-1" / "marker.json").read_text())["run_dir"])
    written = json.loads((run_dir / "step-000000010" / "manifest.json").read_text())
    assert written["world_size"] == (first or 1) and written["global_batch_size"] == 16
    assert written["samples_seen"] == 160  # a whole epoch: 10 steps of 16 rows
    # What a resume on another count reads: a form no rank count is built into.
    if backend == "fsdp":
        assert ".metadata" in {Path(name).name for name in written["files"]}
    else:
        assert "trainable_state.pt" in written["files"]

    resumed = run_training(ledger, out, settings, processes=then)
    # The same run folder, not a fresh start: the fingerprint leaves out the process count.
    assert [p.name for p in (out / "checkpoints").iterdir()] == [run_dir.name]
    assert resumed["resumed_from_step"] == 10 and resumed["world_size"] == (then or 1)
    assert resumed["steps"] == reference["steps"] == 20
    history = read_history(out / "history.jsonl")
    expected = read_history(tmp_path / "reference" / "history.jsonl")
    assert [r["samples"] for r in history] == [r["samples"] for r in expected]
    # The optimizer moments and the schedule came along: every later step matches too.
    np.testing.assert_allclose(
        [r["loss"] for r in history], [r["loss"] for r in expected], rtol=1e-4
    )
    assert [r["lr"] for r in history] == [r["lr"] for r in expected]
    trained = load_file(out / "model" / "adapter_model.safetensors")
    reference_weights = load_file(tmp_path / "reference" / "model" / "adapter_model.safetensors")
    for name, tensor in reference_weights.items():
        torch.testing.assert_close(trained[name], tensor, rtol=1e-4, atol=1e-5)


def drop_deepspeed_weight(checkpoint):
    """One adapter weight gone from DeepSpeed's file; its name."""
    states = checkpoint / "deepspeed" / "mp_rank_00_model_states.pt"
    saved = torch.load(states, weights_only=False)
    lost = next(name for name in saved["module"] if "lora_B" in name)
    del saved["module"][lost]
    saved["param_shapes"] = [
        {k: v for k, v in g.items() if k != lost} for g in saved["param_shapes"]
    ]
    torch.save(saved, states)
    return lost


def drop_fsdp_weight(checkpoint):
    """One adapter weight gone from the distributed checkpoint's metadata; its name."""
    path = checkpoint / "fsdp" / ".metadata"
    metadata = pickle.loads(path.read_bytes())
    lost = next(key for key in metadata.state_dict_metadata if "lora_B" in key)
    del metadata.state_dict_metadata[lost]
    path.write_bytes(pickle.dumps(metadata))
    return lost.removeprefix("model.")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "drop_weight"), [("deepspeed", drop_deepspeed_weight), ("fsdp", drop_fsdp_weight)]
)
def test_a_checkpoint_without_a_trained_weight_is_refused_on_resume(
    ledger, tiny_bert, tiny_settings, train_command, tmp_path, backend, drop_weight
):
    settings = tiny_settings(tiny_bert, epochs=1, segments=2, backend=backend)
    command, env = train_command(ledger, tmp_path, settings, None, segment=1)
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
    marker = json.loads((tmp_path / "segment-1" / "marker.json").read_text())
    checkpoint = Path(marker["run_dir"]) / "step-000000010"
    lost = drop_weight(checkpoint)
    # The manifest sealed again over the change: only the check of the names can catch it.
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    for name in manifest["files"]:
        manifest["files"][name] = sha256_file(checkpoint / name)
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))

    command, env = train_command(ledger, tmp_path, settings, None)
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert f"the checkpoint's trained parameters do not match the model's (missing: ['{lost}']" in (
        result.stderr
    )
    assert not (tmp_path / "metrics.json").exists()
