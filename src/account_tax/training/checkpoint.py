"""Resumable training state: atomic checkpoints with a manifest, and finding the one to resume.

Layout: `<checkpoint-dir>/run-<fingerprint>/step-<step>/`, holding DeepSpeed's files (every rank
writes its own optimizer shard) or, under FSDP, a torch distributed checkpoint (every rank writes
its shards; any number of processes loads it), one RNG state per rank, the step history, under
ZeRO-2 and ZeRO-3 the trained weights and their Adam moments whole (`trainable_state.pt`: what a
resume on another number of processes loads), and `manifest.json` with the sha256 of every other
file. A checkpoint is written under a staging name, the manifest goes in last, and only then is
the folder renamed: a folder named `step-*` with a manifest that matches its files is complete,
anything else is ignored. The fingerprint covers the inputs and every setting that changes the
result (not the number of processes), so a changed config starts afresh instead of resuming a
different run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as torch_dist
from deepspeed import DeepSpeedEngine
from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer
from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state
from transformers import set_seed

from account_tax.errors import writing
from account_tax.io import sha256_file
from account_tax.storage.manifest import (
    STAGING_PREFIX,
    STEP_PREFIX,
    ManifestError,
    changed_files,
    checkpoint_files,
    checkpoint_lock,
    read_manifest,
    step_name,
    write_manifest,
)
from account_tax.training.distributed import (
    Distributed,
    barrier,
    broadcast_from_main,
    gather_from_all,
)
from account_tax.training.fsdp import FsdpEngine
from account_tax.training.history import HISTORY, history_text, read_history

log = logging.getLogger(__name__)

DEEPSPEED_TAG = "deepspeed"
FSDP_TAG = "fsdp"
# The trained parameters and their Adam moments whole, for a resume on another number of
# processes (DeepSpeed's own files are one optimizer shard per rank).
TRAINABLE_STATE = "trainable_state.pt"
ADAM_MOMENTS = ("exp_avg", "exp_avg_sq")
# The optimizers whose trainable state is saved whole (see trainable_state).
ZERO_OPTIMIZERS = (DeepSpeedZeroOptimizer, DeepSpeedZeroOptimizer_Stage3)


def fingerprint(values: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


def read_sealed(directory: Path, dist: Distributed | None = None) -> dict[str, Any] | None:
    """The fields of a complete checkpoint's manifest; None when it is missing, damaged or a
    file does not match. Under several ranks each checks every world_size-th file only."""
    try:
        manifest = read_manifest(directory)
    except ManifestError:
        return None
    names = sorted(manifest.files)
    if dist is not None:
        names = names[dist.rank :: dist.world_size]
    changed = changed_files(directory, manifest, names)
    if changed:
        log.warning("checkpoint %s: %s missing or changed; ignored", directory, changed)
        return None
    return manifest.fields


def latest_checkpoint(
    run_dir: Path, dist: Distributed | None = None
) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete checkpoint. With `dist`, every rank gets it (a collective) and the
    ranks share the hashing of its files, so that none waits long in a collective meanwhile."""
    candidates = sorted(run_dir.glob(f"{STEP_PREFIX}*"), reverse=True)
    if dist is not None:
        # One listing for all: storage may show the ranks a new folder at different times.
        candidates = broadcast_from_main(candidates)
    for directory in candidates:
        manifest = read_sealed(directory, dist)
        complete = manifest is not None
        if dist is not None:
            complete = all(gather_from_all(complete))
        if complete:
            return directory, manifest
    return None


def clear_staging(run_dir: Path) -> None:
    """Drop the staging folders of interrupted saves. Complete checkpoints are deleted only by
    retention, once their upload receipts are verified."""
    for staging in run_dir.glob(f"{STAGING_PREFIX}*"):
        log.info("removing %s, left by an interrupted save", staging)
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
    engine: DeepSpeedEngine | FsdpEngine,
    run_dir: Path,
    dist: Distributed,
    manifest: dict[str, Any],
    history: list[dict[str, Any]],
) -> None:
    """Every rank calls this: each writes its own files and hashes a share of all, rank 0 seals
    the checkpoint. A write that fails (a full disk) is a WriteError naming the checkpoint; its
    staging folder is cleared at the next start.

    The collectives (DeepSpeed's save, gathering the trainable state and the digests, the
    barriers) are reached by all ranks alike; rank 0's extra work in between is file handling.
    """
    name = step_name(manifest["step"])
    staging, final = run_dir / f"{STAGING_PREFIX}{name}", run_dir / name
    with writing(f"checkpoint {name}", staging):
        if dist.is_main:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        barrier()
        # Frozen base weights are not saved: they come from the base model on resume.
        if isinstance(engine, FsdpEngine):
            engine.save(staging / FSDP_TAG, dist.is_main)
        else:
            engine.save_checkpoint(
                staging, tag=DEEPSPEED_TAG, save_latest=False, exclude_frozen_parameters=True
            )
        torch.save(rng_state(), staging / f"rng_state_rank{dist.rank}.pt")
        # ZeRO-2 and ZeRO-3 (ZeRO-1 too in fp32); bf16 under ZeRO-1 partitions differently: its
        # checkpoints resume on the same number of processes only.
        if isinstance(getattr(engine, "optimizer", None), ZERO_OPTIMIZERS):
            state = trainable_state(engine)  # a collective
            if dist.is_main:
                torch.save(state, staging / TRAINABLE_STATE)
        barrier()
        # Each rank hashes a share of the files, so that none waits in a collective while one
        # rank hashes them all (on slow shared storage that could outlast the collective's
        # timeout).
        names = sorted(checkpoint_files(staging))
        mine = {name: sha256_file(staging / name) for name in names[dist.rank :: dist.world_size]}
        digests = {
            name: digest for share in gather_from_all(mine) for name, digest in share.items()
        }
        if dist.is_main:
            (staging / HISTORY).write_text(history_text(history), encoding="utf-8")
            write_manifest(staging, manifest, digests)
            # A folder of this name can only be a checkpoint whose files no longer match; the
            # lock keeps an upload or a deletion of it from running meanwhile.
            with checkpoint_lock(final):
                shutil.rmtree(final, ignore_errors=True)
                os.replace(staging, final)
            clear_staging(run_dir)
            log.info("checkpoint %s written", final)
        barrier()


def fp32_partitions(engine: DeepSpeedEngine) -> list[torch.Tensor]:
    """This rank's flat fp32 partition of each parameter group: the tensors the optimizer steps."""
    if isinstance(engine.optimizer, DeepSpeedZeroOptimizer_Stage3):
        return engine.optimizer.fp32_partitioned_groups_flat
    return engine.optimizer.single_partition_of_fp32_groups


def set_zero3_part(part: torch.Tensor, whole: torch.Tensor) -> None:
    """Copy this rank's part of a whole ZeRO-3 parameter into `part`. Every rank's part has the
    same size, the last one padded past the parameter's end (DeepSpeed's safe_set_full_* leave the
    padding out and cut past the end on the last rank wherever a parameter does not divide
    evenly)."""
    size = part.numel()
    padded = torch.zeros(size * torch_dist.get_world_size(), dtype=torch.float32)
    padded[: whole.numel()] = whole.flatten()
    part.copy_(padded.narrow(0, size * torch_dist.get_rank(), size).to(part.dtype).view_as(part))


def master_fragment(engine: DeepSpeedEngine, param: torch.nn.Parameter, key: str | None):
    """The slices of a parameter (flattened) and of this rank's flat fp32 partition (or its Adam
    moment `key`) that hold the same values; None where this rank holds none of it.

    DeepSpeed's safe_get/set_full_optimizer_state go through a map of the moments that it builds
    at the first step and never again, and that misses partitions whose moments appeared later;
    the fragment addresses themselves are fixed when the engine is built.
    """
    mapping = param._hp_mapping
    if mapping is None:
        return None
    partition = engine.optimizer.single_partition_of_fp32_groups[mapping.param_group_index]
    state = engine.optimizer.optimizer.state
    if key is not None and partition not in state:
        return None  # no step yet: moments of zero
    flat = partition if key is None else state[partition][key]
    lp, hp = mapping.lp_fragment_address, mapping.hp_fragment_address
    return slice(lp.start, lp.start + lp.numel), flat.narrow(0, hp.start, hp.numel)


def gather_master(engine: DeepSpeedEngine, param: torch.nn.Parameter, key: str | None):
    """A parameter's fp32 master weight (key None) or Adam moment, whole, on every rank (a
    collective: each rank adds the fragment its partition holds)."""
    if isinstance(engine.optimizer, DeepSpeedZeroOptimizer_Stage3):
        # A checkpoint follows a step, after which ZeRO-3 has the moments of every group.
        if key is None:
            return safe_get_full_fp32_param(param).cpu()
        return safe_get_full_optimizer_state(param, key).cpu()
    whole = torch.zeros(param.numel(), dtype=torch.float32, device=param.device)
    fragment = master_fragment(engine, param, key)
    if fragment is not None:
        whole[fragment[0]] = fragment[1]
    torch_dist.all_reduce(whole)
    return whole.view(param.shape).cpu()


def trainable_state(engine: DeepSpeedEngine) -> dict[str, Any]:
    """Every trained parameter in fp32 with its Adam moments, whole, and the optimizer's and
    scheduler's counters: a form that any number of processes can load."""
    params = {
        name: {key or "fp32": gather_master(engine, param, key) for key in (None, *ADAM_MOMENTS)}
        for name, param in engine.module.named_parameters()
        if param.requires_grad
    }
    state = engine.optimizer.optimizer.state
    return {
        "params": params,
        # Per parameter group: a group whose partitions got no gradient yet has no state.
        "optimizer_steps": [
            int(state[partition]["step"]) if partition in state else None
            for partition in fp32_partitions(engine)
        ],
        "lr_scheduler": engine.lr_scheduler.state_dict(),
        "global_steps": engine.global_steps,
        "global_samples": engine.global_samples,
        "skipped_steps": engine.skipped_steps,
    }


@torch.no_grad()
def load_trainable_state(engine: DeepSpeedEngine, directory: Path) -> None:
    """Put a checkpoint's trainable state into an engine whose ranks partition it anew: the
    model's weights, the fp32 master weights and the Adam moments of every trained parameter
    (each rank keeps its own part), the step counts and the schedule."""
    # Our own file, checked against the manifest's sha256; the scheduler's state is plain Python.
    saved = torch.load(directory / TRAINABLE_STATE, weights_only=False)
    trained = {name: p for name, p in engine.module.named_parameters() if p.requires_grad}
    require_trained_names(trained.keys(), saved["params"].keys(), directory / TRAINABLE_STATE)
    # Torch's AdamW creates its state at a group's first step; create it now, with the saved step
    # counts, so that the moments have somewhere to go.
    optimizer = engine.optimizer.optimizer
    partitions = fp32_partitions(engine)
    for partition, step in zip(partitions, saved["optimizer_steps"], strict=True):
        if step is not None:
            optimizer.state[partition] = {
                "step": torch.tensor(float(step)),
                **{key: torch.zeros_like(partition) for key in ADAM_MOMENTS},
            }
    zero3 = isinstance(engine.optimizer, DeepSpeedZeroOptimizer_Stage3)
    for name, param in trained.items():
        values = saved["params"][name]
        if zero3:
            set_zero3_part(param.ds_tensor.data, values["fp32"])
            for key in (None, *ADAM_MOMENTS):
                part, _ = engine.optimizer._get_fp32_opt_state_partition(
                    param, release_swap_buffers=False, optim_state_key=key
                )
                set_zero3_part(part, values[key or "fp32"])
            continue
        param.data.copy_(values["fp32"].to(param.dtype))
        for key in (None, *ADAM_MOMENTS):
            fragment = master_fragment(engine, param, key)
            if fragment is not None:
                value = values[key or "fp32"].flatten()[fragment[0]]
                fragment[1].copy_(value.to(fragment[1].device))
    scheduler = engine.lr_scheduler
    scheduler.load_state_dict(saved["lr_scheduler"])
    # The scheduler sets the rates at its next step; the next optimizer step needs them now.
    for group, rate in zip(scheduler.optimizer.param_groups, scheduler.get_last_lr(), strict=True):
        group["lr"] = rate
    engine.global_steps = saved["global_steps"]
    engine.global_samples = saved["global_samples"]
    engine.skipped_steps = saved["skipped_steps"]


def check_trained_names(engine: DeepSpeedEngine, directory: Path) -> None:
    """The checkpoint holds every parameter this model trains, and no other.

    DeepSpeed must load it non-strictly (the frozen base weights are not in it), which would
    silently leave a missing adapter or head weight as initialised."""
    trained = {name for name, p in engine.module.named_parameters() if p.requires_grad}
    # The first rank's file names them all; mmap reads the names, not the weights.
    states = sorted((directory / DEEPSPEED_TAG).glob("*model_states.pt"))[0]
    saved = torch.load(states, map_location="cpu", weights_only=False, mmap=True)
    in_optimizer = {name for group in saved["param_shapes"] for name in group}
    require_trained_names(trained, in_optimizer & saved["module"].keys(), states)


def require_trained_names(trained: Iterable[str], saved: Iterable[str], source: Path) -> None:
    trained, saved = set(trained), set(saved)
    if trained != saved:
        raise RuntimeError(
            f"{source}: the checkpoint's trained parameters do not match the model's (missing:"
            f" {sorted(trained - saved)[:5]}, not in the model: {sorted(saved - trained)[:5]})"
        )


def resumes_on_any_process_count(manifest: dict[str, Any]) -> bool:
    """FSDP's distributed checkpoints reshard on load; of DeepSpeed's, those with a trainable
    state (ZeRO-2 and ZeRO-3; not bf16 under ZeRO-1)."""
    return manifest["backend"] == "fsdp" or TRAINABLE_STATE in manifest["files"]


def load_checkpoint(
    engine: DeepSpeedEngine | FsdpEngine, directory: Path, dist: Distributed, seed: int
) -> list[dict[str, Any]]:
    """Restore model, optimizer, scheduler and this rank's RNG; return the step history.

    A checkpoint written by another number of processes loads resharded (FSDP) or from its
    trainable state (ZeRO-2, ZeRO-3) instead of DeepSpeed's per-rank shards, which DeepSpeed will
    not re-partition; its ranks' RNG states do not map onto these ranks, which are seeded from
    `seed`, the step and their rank instead.
    """
    manifest = read_manifest(directory).fields
    same_ranks = manifest["world_size"] == dist.world_size
    if isinstance(engine, FsdpEngine):
        require_trained_names(
            engine.trained_names(), engine.saved_names(directory / FSDP_TAG), directory / FSDP_TAG
        )
        engine.load(directory / FSDP_TAG)
    elif same_ranks:
        check_trained_names(engine, directory)
        # Not strict: the frozen base weights were left out on save and are already in place.
        loaded, _ = engine.load_checkpoint(directory, tag=DEEPSPEED_TAG, load_module_strict=False)
        if loaded is None:
            raise RuntimeError(f"{directory}: DeepSpeed could not load the checkpoint")
    else:
        load_trainable_state(engine, directory)
    if same_ranks:
        # Our own file, checked against the manifest's sha256; it holds Python and NumPy objects.
        set_rng_state(torch.load(directory / f"rng_state_rank{dist.rank}.pt", weights_only=False))
    else:
        set_seed(seed + manifest["step"] * dist.world_size + dist.rank)
    return read_history(directory / HISTORY)
