"""The training loop: DeepSpeed ZeRO with one process per device, resumable at every checkpoint.

Every rank runs every line below; what only rank 0 does is file output and the progress bar,
never a collective (under ZeRO a collective missed by one rank deadlocks the others).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import deepspeed
import numpy as np
import polars as pl
import torch
import torch.distributed as torch_dist
from transformers import (
    PreTrainedTokenizerBase,
    get_constant_schedule_with_warmup,
    get_linear_schedule_with_warmup,
    set_seed,
)

from account_tax.code_hash import code_sha256
from account_tax.cpu_time import process_cpu_seconds
from account_tax.data.label_map import LABEL_MAP, LabelMap
from account_tax.data.serialize import LABEL_ID, read_split
from account_tax.errors import DataError, writing
from account_tax.io import sha256_file, write_json
from account_tax.progress import progress_bar
from account_tax.storage.manifest import MANIFEST, step_name, write_manifest
from account_tax.training.batching import (
    TokenizedSplit,
    epoch_batches,
    evaluation_batches,
    length_buckets,
    make_loader,
    micro_batches_per_rank,
    on_device,
    rank_batches,
    watched,
)
from account_tax.training.checkpoint import (
    clear_staging,
    fingerprint,
    latest_checkpoint,
    load_checkpoint,
    resumes_on_any_process_count,
    save_checkpoint,
)
from account_tax.training.classifier import hold_rows, save_full_classifier
from account_tax.training.distributed import (
    Distributed,
    barrier,
    gather_from_all,
    init_distributed,
)
from account_tax.training.fsdp import FsdpEngine
from account_tax.training.head_init import (
    embed_classes_without_rows,
    init_head_from_texts,
    resolve_head_init,
)
from account_tax.training.history import append_history, history_text
from account_tax.training.inference import (
    calibrate_model,
    merge_adapter,
    represent_unseen_classes,
)
from account_tax.training.loss import class_weights, forward_loss, label_counts
from account_tax.training.model import (
    base_model_sha256,
    build_model,
    check_max_length,
    is_head_parameter,
    load_tokenizer,
    prepare_for_training,
    resolve_model_dir,
)
from account_tax.training.model_index import build_model_index
from account_tax.training.precision import resolve_precision
from account_tax.training.prototypes import choose_final_head
from account_tax.training.settings import RUN_ONLY_KEYS, EarlyStoppingSettings, TrainSettings
from account_tax.training.stop_signals import StopRequest, TrainingStopped, stop_after_step
from account_tax.training.training_info import TRAINING_INFO
from account_tax.training.warm_start import (
    check_label_ids,
    copy_head_rows,
    head_state,
    learned_rows,
    load_adapter,
    read_init_model,
    rows_to_learn,
    warm_start_settings,
    write_learned_rows,
)

log = logging.getLogger(__name__)

# train.backend: the loop uses the part of DeepSpeed's engine interface that FsdpEngine also has.
Engine = deepspeed.DeepSpeedEngine | FsdpEngine

# The DeepSpeed values that depend on the number of processes.
PROCESS_COUNT_KEYS = ("train_batch_size", "gradient_accumulation_steps")
SETTINGS_OWNED_KEYS = (
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "scheduler",
    "bf16",
)


@dataclass(frozen=True)
class TrainPaths:
    train: Path
    validation: Path
    label_map: Path
    checkpoint_dir: Path
    # Every segment's outputs: the best model so far, its metrics and the history so far.
    output_dir: Path
    metrics: Path
    history: Path
    # Where a segment says which run folder and step it reached (for upload and retention).
    segment_marker: Path | None = None
    # The exported model a warm start begins from (train.init_from).
    init_model: Path | None = None


def deepspeed_config(
    settings: TrainSettings, precision: str, world_size: int, accumulation: int | None = None
) -> dict[str, Any]:
    """The DeepSpeed file (ZeRO stage, optimizer type, clipping, loss scaling) completed with the
    values the train settings own; a file that sets one of those is an error, not a silent
    override. `accumulation` replaces the settings' where a resume keeps a run's global batch on
    another number of processes."""
    path = Path(settings.deepspeed_config)
    text = path.read_text(encoding="utf-8")
    ds_config = json.loads(text)
    clashes = [key for key in SETTINGS_OWNED_KEYS if key in ds_config]
    clashes += ["optimizer.params.lr"] * ("lr" in ds_config["optimizer"]["params"])
    clashes += ["fp16.enabled"] * ("enabled" in ds_config.get("fp16", {}))
    if clashes:
        raise ValueError(f"{path}: {clashes} come from the train settings; remove them")
    if '"auto"' in text:
        raise ValueError(f'{path}: DeepSpeed does not fill in "auto" (the HF Trainer does)')
    batch = settings.per_device_batch_size
    accumulation = accumulation or settings.gradient_accumulation_steps
    ds_config["train_micro_batch_size_per_gpu"] = batch
    ds_config["gradient_accumulation_steps"] = accumulation
    ds_config["train_batch_size"] = batch * accumulation * world_size
    ds_config["optimizer"]["params"]["lr"] = settings.learning_rate
    ds_config["bf16"] = {"enabled": precision == "bf16"}
    ds_config["fp16"] = {**ds_config.get("fp16", {}), "enabled": precision == "fp16"}
    return ds_config


def parameter_groups(model: torch.nn.Module, settings: TrainSettings) -> list[dict[str, Any]]:
    """The adapters (or pretrained weights) at learning_rate first, then the head and the other
    modules trained in full at head_learning_rate; weight decay on matrices only, not on biases
    and normalisation weights (1-d)."""
    head_lr = settings.head_learning_rate or settings.learning_rate
    groups = {
        (head, decayed): {
            "params": [],
            "lr": head_lr if head else settings.learning_rate,
            "weight_decay": settings.weight_decay if decayed else 0.0,
        }
        for head in (False, True)
        for decayed in (True, False)
    }
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            key = (is_head_parameter(name, settings.lora), parameter.ndim >= 2)
            groups[key]["params"].append(parameter)
    return [group for group in groups.values() if group["params"]]


def train_step(
    engine: Engine,
    batches: Iterator[dict[str, torch.Tensor]],
    accumulation: int,
    weights: torch.Tensor,
    device: torch.device,
    stop: StopRequest,
) -> list[float]:
    """One optimizer step over `accumulation` micro-batches: [loss sum, samples, tokens, ranks
    asked to stop, seconds] summed over all ranks."""
    begun = time.perf_counter()
    totals = torch.zeros(5, dtype=torch.float64, device=device)
    for batch in islice(batches, accumulation):
        batch = on_device(batch, device, engine.is_compiled)
        loss, _ = forward_loss(engine, batch, weights)
        engine.backward(loss)
        engine.step()  # updates the weights at the end of the accumulation window only
        totals[:3] += torch.stack(
            [
                loss.detach().double(),
                torch.tensor(len(batch["labels"]), dtype=torch.float64, device=device),
                batch["attention_mask"].sum().double(),
            ]
        )
    # The stop vote and the time ride on the sums every step reduces anyway: no collective of
    # their own, and every rank reads the same time (the budget's stop is everyone's).
    totals[3] = float(stop.requested)
    totals[4] = time.perf_counter() - begun
    torch_dist.all_reduce(totals)
    return totals.tolist()


def compiled_graphs() -> int:
    """Graphs torch.compile made in this process: with the shapes bucketed, at most one per length
    bucket for training and one for validation."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


@torch.no_grad()
def evaluate(
    engine: Engine,
    split: TokenizedSplit,
    tokenizer: PreTrainedTokenizerBase,
    weights: torch.Tensor,
    settings: TrainSettings,
    dist: Distributed,
    buckets: tuple[int, ...] | None,
    postable: torch.Tensor,
) -> dict[str, float]:
    """Weighted loss (the training objective), accuracy and macro-F1 (over the classes in the
    split, as evaluate computes it) over the whole split, and its seconds, all ranks. A row is
    predicted among the accounts that take postings (`postable`), as predict and evaluate do."""
    begun = time.perf_counter()
    batches, counted = evaluation_batches(
        split.lengths, settings.per_device_batch_size, dist.world_size, dist.rank
    )
    loader = make_loader(split, batches, tokenizer, settings.dataloader, buckets)
    totals = torch.zeros(5, dtype=torch.float64, device=dist.device)
    num_labels = len(weights)
    # Per class: true positives, predictions, true rows.
    counts = torch.zeros(3, num_labels, dtype=torch.float64, device=dist.device)
    unpostable = ~postable.to(dist.device)
    engine.eval()
    for index, batch in enumerate(watched(loader, settings.dataloader, "validation")):
        batch = on_device(batch, dist.device, engine.is_compiled)
        loss, logits = forward_loss(engine, batch, weights)
        if index < counted:
            labels = batch["labels"]
            weight_sum = weights.to(dist.device)[labels].sum().double()
            predicted = logits.masked_fill(unpostable, float("-inf")).argmax(dim=-1)
            correct = (predicted == labels).sum().double()
            rows = torch.tensor(len(labels), dtype=torch.float64, device=dist.device)
            totals[:4] += torch.stack([loss.double() * weight_sum, weight_sum, correct, rows])
            hits = labels[predicted == labels]
            for row, ids in enumerate((hits, predicted, labels)):
                counts[row] += torch.bincount(ids, minlength=num_labels).double()
    engine.train()
    totals[4] = time.perf_counter() - begun
    torch_dist.all_reduce(totals)
    torch_dist.all_reduce(counts)
    loss_sum, weight_sum, correct, rows, seconds = totals.tolist()
    true_positives, predictions, truths = counts
    present = truths > 0
    f1 = 2 * true_positives[present] / (predictions[present] + truths[present])
    return {
        "validation_loss": loss_sum / weight_sum,
        "validation_accuracy": correct / rows,
        "validation_macro_f1": f1.mean().item(),
        "validation_seconds": seconds / dist.world_size,
    }


def best_epoch(history: list[dict[str, Any]], stopping: EarlyStoppingSettings) -> dict | None:
    """The epoch-end record of the best model: the last one that improved on every earlier one
    by more than min_delta; None without validation scores."""
    best = None
    for record in history:
        value = record.get(stopping.metric)
        if value is not None and (best is None or stopping.improves(value, best[stopping.metric])):
            best = record
    return best


def stop_reason(
    history: list[dict[str, Any]], stopping: EarlyStoppingSettings, steps_per_epoch: int
) -> str | None:
    """Why training stops early, or None while it goes on. Patience counts epoch ends: a model
    validated within an epoch (where the time budget ran out) may be the best, but is no epoch."""
    best = best_epoch(history, stopping)
    if stopping.patience is None or best is None:
        return None
    since = [
        r
        for r in history
        if r.get(stopping.metric) is not None
        and r["step"] > best["step"]
        and r["step"] % steps_per_epoch == 0
    ]
    if len(since) < stopping.patience:
        return None
    return (
        f"{stopping.metric} not better than {best[stopping.metric]:.4f} (step {best['step']}) "
        f"by more than {stopping.min_delta} for {len(since)} epoch(s)"
    )


def seconds_spent(history: list[dict[str, Any]]) -> float:
    """The seconds of every training step and validation so far (over resumes and segments;
    the mean of the ranks, the same on each): what train.max_minutes counts."""
    return sum(r["seconds"] + r.get("validation_seconds", 0.0) for r in history)


def out_of_time(history: list[dict[str, Any]], max_minutes: float | None) -> str | None:
    """Why the time budget stops training, or None."""
    if max_minutes is None:
        return None
    spent = seconds_spent(history)
    if spent < max_minutes * 60:
        return None
    return f"the time budget of {max_minutes:g} min is spent ({spent / 60:.1f} min)"


def save_outputs(
    engine: Engine,
    tokenizer: PreTrainedTokenizerBase,
    settings: TrainSettings,
    paths: TrainPaths,
    model_dir: Path,
    dist: Distributed,
    mlflow_run_id: str | None,
    head_init: dict[str, Any],
    exported: dict[str, Any],
    learned: pl.DataFrame,
) -> None:
    """The adapter (or the whole model) with tokenizer, label map and provenance; every rank
    calls this, because under ZeRO-3 and FSDP the weights are gathered from all of them."""
    model = engine.module
    if isinstance(engine, FsdpEngine):
        state = engine.full_state_dict()  # a collective
        if dist.is_main and settings.lora.enabled:
            model.save_pretrained(paths.output_dir, state_dict=state)
        elif dist.is_main:
            save_full_classifier(model, paths.output_dir, state)
    else:
        # Under ZeRO-3 each rank holds a slice of every weight: gather the ones that are saved.
        saved = list(model.parameters())
        if settings.lora.enabled:
            saved = [p for p in saved if p.requires_grad]
        stage3 = engine.zero_optimization_stage() == 3
        with deepspeed.zero.GatheredParameters(saved, enabled=stage3):
            if dist.is_main and settings.lora.enabled:
                model.save_pretrained(paths.output_dir)
            elif dist.is_main:
                save_full_classifier(model, paths.output_dir)
    if dist.is_main:
        tokenizer.save_pretrained(paths.output_dir)
        shutil.copyfile(paths.label_map, paths.output_dir / LABEL_MAP)
        write_learned_rows(learned, paths.output_dir)
        info = {
            "base_model": settings.model,
            "base_model_path": str(model_dir),
            "base_model_sha256": base_model_sha256(settings.model),
            "settings": settings.to_dict(),
            "head_init": head_init,
            "exported": exported,
            "world_size": dist.world_size,
            # The MLflow run of the workflow run that trained it: predictions name it.
            "mlflow_run_id": mlflow_run_id,
        }
        write_json(paths.output_dir / TRAINING_INFO, info)
    barrier()


def segment_end(total_steps: int, segment: int | None, segments: int) -> int:
    """The step at which `segment` (1-based, of `segments`) ends; the last one ends training."""
    if segment is None:
        return total_steps
    if not 1 <= segment <= segments:
        raise ValueError(f"segment {segment} is not one of 1..{segments} (train.segments)")
    return math.ceil(total_steps * segment / segments)


def write_segment_marker(
    path: Path, segment: int | None, settings: TrainSettings, run_dir: Path, step: int, total: int
) -> None:
    write_json(
        path,
        {
            "segment": segment or settings.segments,
            "segments": settings.segments,
            "step": step,
            "total_steps": total,
            "run_dir": str(run_dir),
        },
    )


def run_fingerprint(settings: TrainSettings, precision: str, paths: TrainPaths) -> str:
    """What decides that a checkpoint belongs to this run: code, settings, DeepSpeed config and
    inputs; not the number of processes, which a resume may change (the global batch is kept)."""
    ds_config = deepspeed_config(settings, precision, world_size=1)
    inputs = {"train": paths.train, "validation": paths.validation, "label_map": paths.label_map}
    if paths.init_model is not None:
        inputs["init_model"] = paths.init_model / MANIFEST
    return fingerprint(
        {
            # Code that computes differently must not resume the old code's checkpoints.
            "code": code_sha256(Path(__file__)),
            "settings": {k: v for k, v in settings.to_dict().items() if k not in RUN_ONLY_KEYS},
            # A checkpoint holds no frozen weight: they come from the base model as it is now.
            "base_model": base_model_sha256(settings.model),
            "deepspeed": {k: v for k, v in ds_config.items() if k not in PROCESS_COUNT_KEYS},
            "inputs": {name: sha256_file(path) for name, path in inputs.items()},
        }
    )


def kept_accumulation(
    settings: TrainSettings, resume: tuple[Path, dict[str, Any]] | None, world_size: int
) -> int:
    """The gradient accumulation that keeps the resumed run's global batch (rows per optimizer
    step) on `world_size` processes: the configured one for a new run."""
    accumulation = settings.gradient_accumulation_steps
    if resume is None:
        return accumulation
    directory, manifest = resume
    written_by, global_batch = manifest["world_size"], manifest["global_batch_size"]
    if not resumes_on_any_process_count(manifest) and written_by != world_size:
        raise ValueError(
            f"{directory}: a ZeRO-{manifest['zero_stage']} checkpoint written by {written_by}"
            f" process(es) resumes only on {written_by}, not {world_size} (ZeRO-2, the default,"
            " ZeRO-3 and train.backend fsdp resume on any count)"
        )
    per_step = settings.per_device_batch_size * world_size
    if global_batch % per_step:
        raise ValueError(
            f"{directory} was written by {written_by} process(es) with a global batch of"
            f" {global_batch} rows; {world_size} process(es) of {settings.per_device_batch_size}"
            f" rows cannot keep it ({global_batch} is not a multiple of {per_step}). Resume on a"
            " process count that divides it (another train.per_device_batch_size starts a new"
            " run from step 0)"
        )
    kept = global_batch // per_step
    if written_by != world_size:
        log.warning(
            "resuming on %d process(es) a checkpoint written by %d: gradient accumulation %d"
            " keeps the global batch of %d rows",
            world_size,
            written_by,
            kept,
            global_batch,
        )
    return kept


@dataclass
class TrainingRun:
    """What setup prepares for the epochs and the finish: the engine, the data, the plan."""

    settings: TrainSettings  # as given, or a warm start's own (`warm_start_settings`)
    dist: Distributed
    engine: Engine
    tokenizer: PreTrainedTokenizerBase
    label_map: LabelMap
    model_dir: Path
    train_split: TokenizedSplit
    validation_split: TokenizedSplit
    weights: torch.Tensor
    unseen: np.ndarray  # classes without a row to train on (none drawn, in a warm start)
    head_init: dict[str, Any]
    learned: pl.DataFrame  # id and label of every row the exported model will have learned
    precision: str
    run_dir: Path
    accumulation: int  # micro-batches per step and rank; keeps the run's global batch
    buckets: tuple[int, ...] | None  # the padded lengths of a compiled model
    steps_per_epoch: int
    total_steps: int
    stop_step: int  # where this segment ends
    start_step: int
    history: list[dict[str, Any]]
    started: float


def setup(settings: TrainSettings, paths: TrainPaths, segment: int | None) -> TrainingRun:
    """Data, model and DeepSpeed engine, the checkpoint to resume from, if any, and the settings
    to train with: a warm start's own (`warm_start_settings`)."""
    started = time.perf_counter()
    dist = init_distributed()
    label_map = LabelMap.read(paths.label_map)
    labels = label_map.labels
    model_dir = resolve_model_dir(settings.model)
    tokenizer = load_tokenizer(model_dir)
    check_max_length(settings.max_length, model_dir, tokenizer)
    train_frame = read_split(paths.train, len(labels))
    # The class weights are the train split's, also where a warm start trains on a part of it.
    weights = class_weights(
        label_counts(train_frame[LABEL_ID].to_numpy(), len(labels)), settings.class_weight_alpha
    )
    init, warm = None, {}
    if settings.init_from != "none":
        if paths.init_model is None:
            raise ValueError(f"train.init_from is {settings.init_from!r} but no model folder given")
        init = read_init_model(paths.init_model, settings)
        check_label_ids(init, labels, paths.label_map)
        learned = learned_rows(train_frame, labels, init)
        train_frame, warm = rows_to_learn(
            train_frame, labels, init, settings.warm_start.replay_ratio, settings.seed
        )
        if warm["new_rows"] == 0:
            raise DataError(
                f"{paths.train}: {init.folder} has learned every row with its label; nothing new"
                " to train on (train.init_from: none trains afresh)"
            )
        settings = warm_start_settings(settings, warm)
    else:
        learned = learned_rows(train_frame, labels, None)
    train_split = TokenizedSplit.tokenize(train_frame, tokenizer, settings.max_length)
    validation_split = TokenizedSplit.read(
        paths.validation, tokenizer, settings.max_length, len(labels)
    )
    if len(train_split) == 0:
        raise DataError(f"{paths.train}: no rows to train on")
    precision = resolve_precision(settings.precision, dist.device)
    run_dir = paths.checkpoint_dir / f"run-{run_fingerprint(settings, precision, paths)}"
    if dist.is_main:
        clear_staging(run_dir)  # a save that failed (a full disk) or was killed
    resume = latest_checkpoint(run_dir, dist)
    accumulation = kept_accumulation(settings, resume, dist.world_size)
    ds_config = deepspeed_config(settings, precision, dist.world_size, accumulation)
    # Before any model is built: the file says the stage.
    zero_stage = ds_config.get("zero_optimization", {}).get("stage", 0)
    if settings.compile and (settings.backend == "fsdp" or zero_stage >= 3):
        raise ValueError("train.compile runs under DeepSpeed ZeRO stages 0 to 2, not 3 or fsdp")

    batch_size = settings.per_device_batch_size
    num_batches = math.ceil(len(train_split) / batch_size)
    steps_per_epoch = micro_batches_per_rank(num_batches, dist.world_size, accumulation)
    steps_per_epoch //= accumulation
    total_steps = steps_per_epoch * settings.epochs

    # One seed on every rank: the new head and the adapters start out identical everywhere.
    set_seed(settings.seed)
    # A fully trained model's backbone is its own; an adapter goes on the pretrained one.
    backbone_dir = init.folder if init is not None and not init.has_adapter else model_dir
    model = build_model(backbone_dir, labels, settings.head)
    # Classes with no row to train on here (none in the split, or none a warm start drew).
    unseen = label_counts(train_split.label_ids, len(labels)) == 0
    # Before DeepSpeed partitions the parameters (ZeRO-3), so every rank sets whole rows.
    if init is not None:
        head_init = {"method": "warm_start", "from": str(init.folder), **warm}
        head, adapter = head_state(init)
        copy_head_rows(model, head, len(init.labels))
    else:
        head_init = {"method": resolve_head_init(settings.head_init, label_map)}
    if head_init["method"] == "label_text":
        head_init["seconds"] = init_head_from_texts(
            model, tokenizer, label_map.class_texts(), settings.max_length
        )
    hold_rows(model.classifier, torch.from_numpy(unseen))
    head_init["held_classes"] = int(unseen.sum())
    model = prepare_for_training(model, settings.lora, settings.gradient_checkpointing)
    if init is not None:
        load_adapter(model, adapter, init.folder)
        # New classes start from their text as the warm model embeds it.
        new_classes = np.arange(len(labels)) >= len(init.labels)
        embed_classes_without_rows(
            model, tokenizer, label_map.class_texts(), new_classes, settings.max_length
        )
        head_init["new_classes"] = int(new_classes.sum())
    warmup = round(settings.warmup_ratio * total_steps)
    if settings.lr_schedule == "linear":
        scheduler = partial(
            get_linear_schedule_with_warmup, num_warmup_steps=warmup, num_training_steps=total_steps
        )
    else:
        scheduler = partial(get_constant_schedule_with_warmup, num_warmup_steps=warmup)
    if settings.backend == "fsdp":
        groups = partial(parameter_groups, settings=settings)
        engine = FsdpEngine(model, groups, ds_config, precision, accumulation, scheduler, dist)
    else:
        engine, *_ = deepspeed.initialize(
            model=model,
            model_parameters=parameter_groups(model, settings),
            config=ds_config,
            lr_scheduler=scheduler,
        )

    buckets = None
    if settings.compile:
        buckets = length_buckets(settings.max_length)
        # CUDA graphs on a GPU: launches, not arithmetic, bound a small model's step there.
        mode = "reduce-overhead" if dist.device.type == "cuda" else "default"
        engine.compile(compile_kwargs={"dynamic": False, "mode": mode})
        log.info("compiling the model (mode %s) for length buckets %s", mode, buckets)

    if resume is None:
        history: list[dict[str, Any]] = []
        start_step = 0
        # From here on each rank draws its own dropout masks.
        set_seed(settings.seed + dist.rank)
    else:
        history = load_checkpoint(engine, resume[0], dist, settings.seed)
        start_step = resume[1]["step"]
        log.info("resuming from %s (step %d of %d)", resume[0], start_step, total_steps)
    if dist.is_main:
        paths.history.parent.mkdir(parents=True, exist_ok=True)
        paths.history.write_text(history_text(history), encoding="utf-8")
        log.info(
            "training: %d rows, %d classes, %d steps per epoch, %d epochs, %d process(es), %s, "
            "checkpoints in %s",
            len(train_split),
            len(labels),
            steps_per_epoch,
            settings.epochs,
            dist.world_size,
            precision,
            run_dir,
        )
    return TrainingRun(
        settings=settings,
        dist=dist,
        engine=engine,
        tokenizer=tokenizer,
        label_map=label_map,
        model_dir=model_dir,
        train_split=train_split,
        validation_split=validation_split,
        weights=weights,
        unseen=unseen,
        head_init=head_init,
        learned=learned,
        precision=precision,
        run_dir=run_dir,
        accumulation=accumulation,
        buckets=buckets,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        stop_step=segment_end(total_steps, segment, settings.segments),
        start_step=start_step,
        history=history,
        started=started,
    )


def run_epochs(run: TrainingRun, settings: TrainSettings, paths: TrainPaths) -> tuple[int, str]:
    """Train from the start step to the segment's end or an early stop, evaluating at every
    epoch end and checkpointing as configured; the step reached and why training stopped
    (empty when it did not stop early). A stop signal ends it after a whole step: TrainingStopped.
    """
    dist, engine, history = run.dist, run.engine, run.history
    steps_per_epoch, stop_step = run.steps_per_epoch, run.stop_step
    batch_size, accumulation = settings.per_device_batch_size, run.accumulation
    progress = progress_bar(
        total=stop_step, initial=run.start_step, desc="train", unit="step", disable=not dist.is_main
    )
    step = run.start_step
    # A re-run of a finished segment finds its checkpoint (or a later one) and trains nothing.
    first_epoch = step // steps_per_epoch if step < stop_step else settings.epochs
    # Stopped early: a resume after the stop trains no further (the last epoch is no stop).
    stopped = (
        out_of_time(history, settings.max_minutes)
        or stop_reason(history, settings.early_stopping, steps_per_epoch)
        if step < run.total_steps
        else None
    )
    if stopped is not None:
        first_epoch = settings.epochs
    with stop_after_step() as stop:
        for epoch in range(first_epoch, settings.epochs):
            planned = epoch_batches(
                run.train_split.lengths, batch_size, settings.seed, epoch, settings.group_by_length
            )
            mine = rank_batches(planned, dist.world_size, dist.rank, accumulation)
            done = step - epoch * steps_per_epoch
            loader = make_loader(
                run.train_split,
                mine[done * accumulation :],
                run.tokenizer,
                settings.dataloader,
                run.buckets,
            )
            stream = watched(loader, settings.dataloader, "training")
            engine.train()
            for _ in range(done, min(steps_per_epoch, stop_step - epoch * steps_per_epoch)):
                # The first group is the adapters' (or the pretrained weights'), the last the
                # head's.
                rates = engine.get_lr()
                lr, head_lr = rates[0], rates[-1]
                loss_sum, step_samples, step_tokens, stop_votes, seconds = train_step(
                    engine, stream, accumulation, run.weights, dist.device, stop
                )
                seconds /= dist.world_size
                step += 1
                record = {
                    "step": step,
                    "epoch": round(step / steps_per_epoch, 4),
                    "loss": loss_sum / (accumulation * dist.world_size),
                    "lr": lr,
                    "head_lr": head_lr,
                    "samples_per_s": step_samples / seconds,
                    "samples": step_samples,
                    "tokens": step_tokens,
                    "seconds": seconds,
                }
                epoch_end = step % steps_per_epoch == 0
                last = step == run.total_steps
                # Out of time within an epoch: the model is validated and saved where it stands.
                spent = None if last else out_of_time([*history, record], settings.max_minutes)
                # The validation split is empty where split.validation_fraction is 0.
                if (epoch_end or spent) and len(run.validation_split):
                    record |= evaluate(
                        engine,
                        run.validation_split,
                        run.tokenizer,
                        run.weights,
                        settings,
                        dist,
                        run.buckets,
                        torch.from_numpy(run.label_map.postable_mask()),
                    )
                history.append(record)
                if dist.is_main:
                    report_step(record, progress, paths.history, epoch)
                    if epoch_end and run.buckets:
                        log.info("compiled graphs so far: %d", compiled_graphs())
                if (
                    epoch_end
                    or spent
                    or step % settings.checkpoint_every_steps == 0
                    or step == stop_step
                ):
                    best = best_epoch(history, settings.early_stopping)
                    fsdp = isinstance(engine, FsdpEngine)
                    manifest = {
                        "step": step,
                        "epoch": record["epoch"],
                        "metrics": {k: v for k, v in record.items() if k not in ("step", "epoch")},
                        # Retention keeps it: the model that will be exported.
                        "best_step": best["step"] if best else None,
                        # What a resume on another number of processes keeps.
                        "world_size": dist.world_size,
                        "global_batch_size": batch_size * accumulation * dist.world_size,
                        "samples_seen": sum(r["samples"] for r in history),
                        "backend": settings.backend,
                        "zero_stage": None if fsdp else engine.zero_optimization_stage(),
                    }
                    save_checkpoint(engine, run.run_dir, dist, manifest, history)
                if stop_votes:
                    progress.close()
                    torch_dist.destroy_process_group()
                    raise TrainingStopped(stop.signum or signal.SIGTERM, step)
                stopped = spent or (
                    stop_reason(history, settings.early_stopping, steps_per_epoch)
                    if epoch_end and not last
                    else None
                )
                if stopped is not None:
                    break
            if stopped is not None:
                if dist.is_main:
                    log.info("early stopping at step %d: %s", step, stopped)
                break
    progress.close()
    return step, stopped or ""


def report_step(record: dict[str, Any], progress: Any, history: Path, epoch: int) -> None:
    """Rank 0: the step's record to the history file, the progress bar and, at an epoch's end,
    the log."""
    append_history(history, record)
    progress.set_postfix(loss=f"{record['loss']:.4f}", samples_s=f"{record['samples_per_s']:.1f}")
    progress.update()
    if "validation_loss" in record:
        log.info(
            "epoch %d: validation loss %.4f, accuracy %.4f, macro-F1 %.4f",
            epoch + 1,
            record["validation_loss"],
            record["validation_accuracy"],
            record["validation_macro_f1"],
        )


def finish(
    run: TrainingRun,
    settings: TrainSettings,
    paths: TrainPaths,
    step: int,
    stopped: str,
    mlflow_run_id: str | None,
) -> dict[str, Any]:
    """Export the best epoch's model so far and return the metrics; rank 0 then calibrates the
    model, represents the classes without rows by their texts, merges the adapter when asked and
    seals the folder."""
    dist, engine, history = run.dist, run.engine, run.history
    best = best_epoch(history, settings.early_stopping)
    if best is not None and best["step"] != step:
        # Every rank: the weights of the best epoch's checkpoint, as on a resume.
        load_checkpoint(engine, run.run_dir / step_name(best["step"]), dist, settings.seed)
    final = best or history[-1]
    ended = stopped or ("every epoch ran" if step >= run.total_steps else "the segment's end")
    exported = {
        "step": final["step"],
        "epoch": final["epoch"],
        "metric": settings.early_stopping.metric if best else None,
        "value": best[settings.early_stopping.metric] if best else None,
        "stopped": ended,
    }
    with writing("the trained model", paths.output_dir):
        save_outputs(
            engine,
            run.tokenizer,
            settings,
            paths,
            run.model_dir,
            dist,
            mlflow_run_id,
            run.head_init,
            exported,
            run.learned,
        )
    steps_per_epoch = run.steps_per_epoch
    recent = history[-steps_per_epoch:]
    seconds = sum(r["seconds"] for r in history)
    metrics = {
        # Mean over the last epoch's steps: one step's loss is one small batch's.
        "train_loss": sum(r["loss"] for r in recent) / len(recent),
        # The exported model's: the best epoch's.
        "validation_loss": final.get("validation_loss"),
        "validation_accuracy": final.get("validation_accuracy"),
        "validation_macro_f1": final.get("validation_macro_f1"),
        "exported_step": final["step"],
        "exported_epoch": final["epoch"],
        "stopped_early": bool(stopped),
        "stopped": ended,
        "steps": step,
        "total_steps": run.total_steps,
        "epochs": settings.epochs,
        "epochs_run": round(step / steps_per_epoch, 4),
        "train_rows": len(run.train_split),
        "world_size": dist.world_size,
        "precision": run.precision,
        "resumed_from_step": run.start_step,
        "compiled_graphs": compiled_graphs() if run.buckets else None,
        # Throughput over every step, across segments and resumes (data waits included,
        # evaluation not).
        "train_samples_per_s": sum(r["samples"] for r in history) / seconds if seconds else None,
        "train_tokens_per_s": sum(r["tokens"] for r in history) / seconds if seconds else None,
        "wall_time_s": time.perf_counter() - run.started,
        "training_minutes": seconds_spent(history) / 60,
    }
    # The other ranks are done: their CPU time now is their whole job's.
    cpu_seconds = gather_from_all(process_cpu_seconds())
    barrier()
    torch_dist.destroy_process_group()
    if dist.is_main:
        # Once the process group is gone, so that no rank waits in a collective meanwhile.
        with writing("the trained model", paths.output_dir):
            seal_model(run, settings, paths, metrics)
        metrics["cpu_seconds"] = sum(cpu_seconds[1:]) + process_cpu_seconds()
        write_json(paths.metrics, metrics)
    return metrics


def seal_model(
    run: TrainingRun, settings: TrainSettings, paths: TrainPaths, metrics: dict[str, Any]
) -> None:
    """Rank 0's last touches to the exported model: the classes without rows, the evidence
    index, the head's final rows (learned, prototypes, blend or refit), the merged adapter, the
    calibration (its temperature goes into `metrics`) and the manifest."""
    if run.head_init["method"] == "label_text":
        represent_unseen_classes(
            paths.output_dir, run.label_map.class_texts(), run.unseen, settings.max_length
        )
    # The index holds the embeddings only, which the head's rows do not change.
    metrics |= build_model_index(
        paths.output_dir,
        {"train": paths.train, "validation": paths.validation},
        carried=paths.init_model,
        reuse_min_cosine=settings.warm_start.reuse_index_min_cosine,
        seed=settings.seed,
    )
    if settings.final_head != "learned" and settings.head == "cosine":
        texts = run.label_map.class_texts() if run.label_map.named else None
        choice = choose_final_head(
            paths.output_dir,
            settings.final_head,
            texts,
            settings.max_length,
            settings.class_weight_alpha,
            settings.seed,
        )
        metrics.update(choice.metrics())
    if settings.merge_adapter:
        merge_adapter(paths.output_dir, paths.output_dir / "merged")
    metrics["temperature"] = calibrate_model(paths.output_dir, paths.validation)["temperature"]
    # Sealed like a checkpoint, so the upload can prove every file of it.
    write_manifest(paths.output_dir, {"model": settings.model})


def train(
    settings: TrainSettings,
    paths: TrainPaths,
    segment: int | None = None,
    mlflow_run_id: str | None = None,
) -> dict[str, Any]:
    """Train, or resume from the newest complete checkpoint, up to the end of `segment` (all
    steps when None), then export the best model so far and return its metrics.

    A segment ends with a checkpoint, so the next one, a separate process (and Snakemake job),
    resumes there while the checkpoint is uploaded.
    """
    run = setup(settings, paths, segment)
    settings = run.settings
    step, stopped = run_epochs(run, settings, paths)
    if run.dist.is_main and paths.segment_marker is not None:
        write_segment_marker(
            paths.segment_marker,
            segment,
            settings,
            run.run_dir,
            min(step, run.stop_step),
            run.total_steps,
        )
    return finish(run, settings, paths, step, stopped, mlflow_run_id)
