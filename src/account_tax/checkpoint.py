"""Resumable training state: atomic checkpoints with a manifest, and finding the one to resume.

Layout: `<checkpoint-dir>/run-<fingerprint>/step-<step>/`, holding DeepSpeed's files (every rank
writes its own optimizer shard), one RNG state per rank, the step history, and `manifest.json`
with the sha256 of every other file. A checkpoint is written under a staging name, the manifest
goes in last, and only then is the folder renamed: a folder named `step-*` with a manifest that
matches its files is complete, anything else is ignored. The fingerprint covers the inputs and
every setting that changes the result, so a changed config starts afresh instead of resuming a
different run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from deepspeed import DeepSpeedEngine

from account_tax.distributed import Distributed, barrier, broadcast_from_main
from account_tax.io import sha256_file
from account_tax.manifest import (
    MANIFEST,
    STAGING_PREFIX,
    STEP_PREFIX,
    checkpoint_lock,
    step_name,
    write_manifest,
)

log = logging.getLogger(__name__)

HISTORY = "history.jsonl"
DEEPSPEED_TAG = "deepspeed"


def fingerprint(values: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of a complete checkpoint; None when it is missing or a file does not match."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    for relative, digest in manifest["files"].items():
        path = directory / relative
        if not path.is_file() or sha256_file(path) != digest:
            log.warning("checkpoint %s: %s is missing or changed; ignored", directory, relative)
            return None
    return manifest


def latest_checkpoint(run_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    for directory in sorted(run_dir.glob(f"{STEP_PREFIX}*"), reverse=True):
        manifest = read_manifest(directory)
        if manifest is not None:
            return directory, manifest
    return None


def clear_staging(run_dir: Path) -> None:
    """Drop the staging folders of interrupted saves. Complete checkpoints are deleted only by
    retention, once their upload receipts are verified."""
    for staging in run_dir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(staging)


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    engine: DeepSpeedEngine,
    run_dir: Path,
    dist: Distributed,
    manifest: dict[str, Any],
    history: list[dict[str, Any]],
) -> None:
    """Every rank calls this: each writes its own files, rank 0 seals the checkpoint.

    The only collectives are DeepSpeed's save and the barriers, reached by all ranks alike;
    rank 0's extra work in between is file handling.
    """
    name = step_name(manifest["step"])
    staging, final = run_dir / f"{STAGING_PREFIX}{name}", run_dir / name
    if dist.is_main:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    barrier()
    # Frozen base weights are not saved: they come from the base model on resume.
    engine.save_checkpoint(
        staging, tag=DEEPSPEED_TAG, save_latest=False, exclude_frozen_parameters=True
    )
    torch.save(rng_state(), staging / f"rng_state_rank{dist.rank}.pt")
    barrier()
    if dist.is_main:
        (staging / HISTORY).write_text(
            "".join(json.dumps(record) + "\n" for record in history), encoding="utf-8"
        )
        write_manifest(staging, manifest)
        # A folder of this name can only be a checkpoint whose files no longer match; the lock
        # keeps an upload or a deletion of it from running meanwhile.
        with checkpoint_lock(final):
            shutil.rmtree(final, ignore_errors=True)
            os.replace(staging, final)
        clear_staging(run_dir)
        log.info("checkpoint %s written", final)
    barrier()


def find_resume_point(run_dir: Path, dist: Distributed) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete checkpoint, as rank 0 sees it, on every rank (a collective)."""
    found = latest_checkpoint(run_dir) if dist.is_main else None
    return broadcast_from_main(found)


def load_checkpoint(
    engine: DeepSpeedEngine, directory: Path, dist: Distributed
) -> list[dict[str, Any]]:
    """Restore model, optimizer, scheduler and this rank's RNG; return the step history."""
    # Not strict: the frozen base weights were left out on save and are already in place.
    loaded, _ = engine.load_checkpoint(directory, tag=DEEPSPEED_TAG, load_module_strict=False)
    if loaded is None:
        raise RuntimeError(f"{directory}: DeepSpeed could not load the checkpoint")
    # Our own file, checked against the manifest's sha256; it holds Python and NumPy objects.
    set_rng_state(torch.load(directory / f"rng_state_rank{dist.rank}.pt", weights_only=False))
    lines = (directory / HISTORY).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]
