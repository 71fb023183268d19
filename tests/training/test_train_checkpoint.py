"""Finding the checkpoint to resume: only complete ones, whose files match their manifest.

Writing and loading real checkpoints is covered end to end in test_train_runs.py (a run killed
with SIGKILL and resumed, a run resumed on another number of processes); here the manifest rules,
on folders laid out as a save leaves them, and what a resume keeps.
"""

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import corpus
from tiny_models import build_tiny_bert

from account_tax.io import sha256_file
from account_tax.storage.manifest import (
    MANIFEST,
    STAGING_PREFIX,
    step_name,
)
from account_tax.training.checkpoint import (
    clear_staging,
    fingerprint,
    latest_checkpoint,
)
from account_tax.training.loop import (
    PROCESS_COUNT_KEYS,
    TrainPaths,
    deepspeed_config,
    kept_accumulation,
    run_fingerprint,
)
from account_tax.training.settings import TrainSettings

REPO = Path(__file__).resolve().parents[2]


def write_checkpoint(run_dir, step, sealed=True):
    folder = run_dir / step_name(step)
    (folder / "deepspeed").mkdir(parents=True)
    (folder / "deepspeed" / "optim_states.pt").write_bytes(b"state of step %d" % step)
    (folder / "rng_state_rank0.pt").write_bytes(b"rng")
    if sealed:
        files = {
            str(p.relative_to(folder)): sha256_file(p)
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }
        (folder / MANIFEST).write_text(json.dumps({"step": step, "files": files}))
    return folder


def test_the_newest_sealed_checkpoint_is_resumed(tmp_path):
    write_checkpoint(tmp_path, 4)
    newest = write_checkpoint(tmp_path, 8)
    write_checkpoint(tmp_path, 12, sealed=False)  # killed before its manifest
    (tmp_path / f"{STAGING_PREFIX}{step_name(16)}").mkdir()

    folder, manifest = latest_checkpoint(tmp_path)

    assert folder == newest and manifest["step"] == 8


def test_a_checkpoint_whose_files_changed_or_vanished_is_ignored(tmp_path):
    oldest = write_checkpoint(tmp_path, 4)
    changed = write_checkpoint(tmp_path, 8)
    (changed / "deepspeed" / "optim_states.pt").write_bytes(b"truncated")
    vanished = write_checkpoint(tmp_path, 12)
    (vanished / "rng_state_rank0.pt").unlink()

    assert latest_checkpoint(tmp_path)[0] == oldest


def test_no_checkpoint_means_a_fresh_start(tmp_path):
    assert latest_checkpoint(tmp_path / "never-written") is None


def test_interrupted_saves_are_cleared_and_checkpoints_left_to_retention(tmp_path):
    for step in (4, 8, 12):
        write_checkpoint(tmp_path, step)
    (tmp_path / f"{STAGING_PREFIX}{step_name(16)}" / "deepspeed").mkdir(parents=True)

    clear_staging(tmp_path)

    assert sorted(p.name for p in tmp_path.iterdir()) == [step_name(s) for s in (4, 8, 12)]


def test_fingerprint_ignores_key_order_but_not_values():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})


def resumed(world_size, global_batch, zero_stage=2, backend="deepspeed"):
    # ZeRO-2 and ZeRO-3 write the trainable state whole; ZeRO-1 in bf16 and FSDP do not.
    files = {"trainable_state.pt": "…"} if backend == "deepspeed" and zero_stage >= 2 else {}
    manifest = {"world_size": world_size, "global_batch_size": global_batch, "files": files}
    return Path("run/step-000000010"), manifest | {"zero_stage": zero_stage, "backend": backend}


def test_a_resume_keeps_the_global_batch_or_says_why_it_cannot():
    settings = TrainSettings.of(per_device_batch_size=8, gradient_accumulation_steps=1)
    assert kept_accumulation(settings, None, world_size=4) == 1  # a new run: as configured
    assert kept_accumulation(settings, resumed(2, 16), world_size=2) == 1
    assert kept_accumulation(settings, resumed(2, 16), world_size=1) == 2
    assert kept_accumulation(settings, resumed(1, 32), world_size=2) == 2
    assert kept_accumulation(settings, resumed(2, 16, zero_stage=3), world_size=1) == 2
    # A distributed checkpoint reshards on load.
    fsdp = resumed(2, 16, zero_stage=None, backend="fsdp")
    assert kept_accumulation(settings, fsdp, world_size=1) == 2
    with pytest.raises(ValueError, match=r"written by 2 process\(es\) with a global batch of 16"):
        kept_accumulation(settings, resumed(2, 16), world_size=3)
    with pytest.raises(ValueError, match="a ZeRO-1 checkpoint written by 2 process"):
        kept_accumulation(settings, resumed(2, 16, zero_stage=1), world_size=1)
    assert kept_accumulation(settings, resumed(2, 16, zero_stage=1), world_size=2) == 1


def fingerprinted_inputs(folder: Path) -> TrainPaths:
    """Train paths in `folder`, its three inputs (all the fingerprint reads of them) written."""
    paths = TrainPaths(
        train=folder / "train.parquet",
        validation=folder / "validation.parquet",
        label_map=folder / "label_map.json",
        checkpoint_dir=folder,
        output_dir=folder / "model",
        metrics=folder / "metrics.json",
        history=folder / "history.jsonl",
    )
    for path in (paths.train, paths.validation, paths.label_map):
        path.write_text(path.name)
    return paths


def test_the_run_fingerprint_leaves_out_the_process_count_only(tmp_path):
    paths = fingerprinted_inputs(tmp_path)
    settings = TrainSettings.of(
        deepspeed_config=str(REPO / "config" / "deepspeed" / "zero2.json"),
        per_device_batch_size=8,
    )
    same = run_fingerprint(settings, "fp32", paths)
    # What the process count changes, and the accumulation that a resume on another count
    # keeps the global batch with, is PROCESS_COUNT_KEYS and nothing else, which the fingerprint
    # leaves out: a resume on 4 processes takes a 1-process run's checkpoints.
    one = deepspeed_config(settings, "fp32", world_size=1, accumulation=4)
    changed = set()
    for world_size, accumulation in ((4, 1), (2, 2), (4, 4)):
        other = deepspeed_config(settings, "fp32", world_size, accumulation)
        changed |= {key for key in one.keys() | other.keys() if one.get(key) != other.get(key)}
    assert changed == set(PROCESS_COUNT_KEYS)
    assert run_fingerprint(settings, "fp32", paths) == same
    assert run_fingerprint(settings, "bf16", paths) != same
    larger = dataclasses.replace(settings, per_device_batch_size=16)
    assert run_fingerprint(larger, "fp32", paths) != same
    paths.train.write_text("other rows")
    assert run_fingerprint(settings, "fp32", paths) != same


def test_the_run_fingerprint_holds_the_base_models_files(tmp_path):
    """A checkpoint holds no frozen weight: a resume takes them from the base model as it is
    now, so other files at the same path make another run."""
    paths = fingerprinted_inputs(tmp_path)
    base = build_tiny_bert(tmp_path / "base", corpus())
    settings = TrainSettings.of(
        model=str(base), deepspeed_config=str(REPO / "config" / "deepspeed" / "zero2.json")
    )
    before = run_fingerprint(settings, "fp32", paths)
    build_tiny_bert(base, corpus(), dropout=0.0)
    assert run_fingerprint(settings, "fp32", paths) != before
