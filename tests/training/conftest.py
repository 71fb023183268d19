"""Tiny real models (see tests/tiny_models.py) trained on this ledger's own words, and a small
serialized ledger, built once per test session."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
import torch
from tiny_models import build_tiny_bert, build_tiny_llama

REPO = Path(__file__).resolve().parents[2]
LABELS = ["office", "travel", "software", "rent", "unused"]
VENDORS = {
    "office": ["staples", "office depot", "paper world"],
    "travel": ["lufthansa", "hilton hotel", "city taxi"],
    "software": ["github", "atlassian", "jetbrains"],
    "rent": ["landlord gmbh", "property trust", "city estates"],
}
MEMOS = {
    "office": ["printer paper and toner", "pens folders and staples", "desk chair"],
    "travel": ["flight to berlin", "hotel night conference", "taxi to the airport"],
    "software": ["annual license renewal", "cloud subscription seats", "ide licenses"],
    "rent": ["office rent march", "warehouse lease", "parking space rent"],
}
FILLER = "additional notes about the booking approved by the finance team"

torch.set_num_threads(1)


def ledger_rows(count: int, seed: int) -> list[dict[str, object]]:
    """Records of the four used classes; every fifth memo is long, so lengths are skewed."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        label = LABELS[index % 4]
        memo = rng.choice(MEMOS[label])
        if index % 5 == 0:
            memo = f"{memo} {FILLER} {FILLER}"
        vendor, amount = rng.choice(VENDORS[label]), rng.randint(5, 900)
        text = f"vendor: {vendor} | memo: {memo} | amount: {amount}"
        rows.append({"id": f"r{seed}-{index}", "text": text, "label_id": LABELS.index(label)})
    return rows


def corpus() -> list[str]:
    words = [FILLER, "vendor memo amount", *"0123456789|:"]
    words += [text for group in (*VENDORS.values(), *MEMOS.values()) for text in group]
    return words * 3


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), corpus())


@pytest.fixture(scope="session")
def tiny_bert_without_dropout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert-0"), corpus(), dropout=0.0)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), corpus())


@pytest.fixture(scope="session")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Train and validation splits and a label map in the data stages' format; class `unused`
    has no samples."""
    folder = tmp_path_factory.mktemp("ledger")
    schema = {"id": pl.String, "text": pl.String, "label_id": pl.Int32}
    paths = {"train": folder / "train.parquet", "validation": folder / "validation.parquet"}
    pl.DataFrame(ledger_rows(160, seed=1), schema=schema).write_parquet(paths["train"])
    pl.DataFrame(ledger_rows(36, seed=2), schema=schema).write_parquet(paths["validation"])
    counts = {label: (40 if label != "unused" else 0) for label in LABELS}
    paths["label_map"] = folder / "label_map.json"
    paths["label_map"].write_text(
        json.dumps({"label_column": "label", "labels": LABELS, "counts": counts}), encoding="utf-8"
    )
    return paths


@pytest.fixture(scope="session")
def train_command() -> Callable[..., tuple[list[str], dict[str, str]]]:
    """scripts/train.py on the ledger: under torchrun with `processes`, or plain python (None).

    It runs from the repository root, as under Snakemake: the DeepSpeed config paths are relative
    to it, and DeepSpeed's compiled CPU module is cached once in its .cache/.
    """

    def command(
        ledger: dict[str, Path],
        out: Path,
        settings: dict,
        processes: int | None,
        segment: int | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        launcher = [sys.executable]
        if processes is not None:
            launcher += [
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc_per_node={processes}",
            ]
        # A segment's outputs in a folder of their own, as in the workflow; the checkpoints shared.
        outputs = out if segment is None else out / f"segment-{segment}"
        arguments = [
            str(REPO / "scripts" / "train.py"),
            "--train", str(ledger["train"]),
            "--validation", str(ledger["validation"]),
            "--label-map", str(ledger["label_map"]),
            "--output-dir", str(outputs / "model"),
            "--metrics", str(outputs / "metrics.json"),
            "--history", str(outputs / "history.jsonl"),
            "--checkpoint-dir", str(out / "checkpoints"),
            "--settings", json.dumps({"train": settings}),
        ]  # fmt: skip
        if segment is not None:
            arguments += [
                "--segment",
                str(segment),
                "--segment-marker",
                str(outputs / "marker.json"),
            ]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(name, None)
        return launcher + arguments, env

    return command


@pytest.fixture(scope="session")
def run_training(train_command: Callable) -> Callable[..., dict]:
    """Run the training script to the end; its metrics."""

    def run(
        ledger: dict[str, Path], out: Path, settings: dict, processes: int | None = None
    ) -> dict:
        command, env = train_command(ledger, out, settings, processes)
        result = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
        return json.loads((out / "metrics.json").read_text(encoding="utf-8"))

    return run


@pytest.fixture(scope="session")
def tiny_settings() -> Callable[..., dict]:
    """Fast train settings for the tiny models; keyword arguments replace top-level keys. fp32,
    so that runs compare exactly on any CPU (bf16 has its own tests); the head's learned rows
    as training left them, so that the exported model is the loop's (the final head has tests
    of its own)."""

    def settings(model: Path, **overrides: object) -> dict:
        base = {
            "model": str(model),
            "max_length": 48,
            "epochs": 2,
            "per_device_batch_size": 8,
            "learning_rate": 0.01,
            "checkpoint_every_steps": 4,
            "lora": {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.1},
            "precision": "fp32",
            "final_head": "learned",
        }
        return base | overrides

    return settings
