"""`auto` precision: fp32 on a GPU; on the CPU bf16 where the processor has native bf16 (fp32
elsewhere), checkpoints resume to the same result, and inference in bf16 scores as training's
evaluation."""

import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from account_tax.training import precision
from account_tax.training.inference import load_classifier, predict_logits

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["deepspeed", "fsdp"])
def test_auto_precision_trains_resumes_and_predicts_in_the_cpus_best_format(
    ledger, tiny_bert, tiny_settings, run_training, train_command, tmp_path, backend
):
    expected = "bf16" if precision.cpu_has_bf16() else "fp32"
    settings = tiny_settings(tiny_bert, epochs=2, segments=2, precision="auto", backend=backend)
    reference = run_training(ledger, tmp_path / "reference", settings)
    assert reference["precision"] == expected
    assert np.isfinite(reference["train_loss"]) and np.isfinite(reference["validation_loss"])

    # Stopped at a checkpoint and resumed: the same run to the last digit, in either format.
    out = tmp_path / "segmented"
    command, env = train_command(ledger, out, settings, None, segment=1)
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
    resumed = run_training(ledger, out, settings)
    assert resumed["resumed_from_step"] > 0
    for key in ("steps", "train_loss", "validation_loss", "validation_accuracy"):
        assert resumed[key] == reference[key], key

    # Loaded for inference in the same format, the exported model scores the validation split as
    # training's evaluation did (bf16 rounds differently in other batch shapes: within a row).
    model, tokenizer, _ = load_classifier(tmp_path / "reference" / "model")
    dtype = torch.bfloat16 if expected == "bf16" else torch.float32
    assert {p.dtype for p in model.parameters()} == {dtype}
    validation = pl.read_parquet(ledger["validation"])
    logits = predict_logits(model, tokenizer, validation["text"].to_list(), max_length=48)
    assert logits.dtype == np.float32
    correct = logits.argmax(axis=1) == validation["label_id"].to_numpy()
    assert abs(correct.sum() - reference["validation_accuracy"] * len(correct)) <= 1


@pytest.mark.parametrize(
    ("requested", "device", "native_bf16", "expected"),
    [
        ("auto", "cuda", True, "fp32"),
        ("bf16", "cuda", True, "bf16"),
        ("fp16", "cuda", True, "fp16"),
        ("auto", "cpu", True, "bf16"),
        ("auto", "cpu", False, "fp32"),
        ("bf16", "cpu", True, "bf16"),
        ("fp32", "cpu", True, "fp32"),
    ],
)
def test_auto_is_fp32_on_a_gpu_and_native_bf16_on_a_cpu(
    monkeypatch, requested, device, native_bf16, expected
):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: native_bf16)
    assert precision.resolve_precision(requested, torch.device(device)) == expected


@pytest.mark.parametrize(
    ("requested", "message"),
    [("fp16", "fp16 needs a GPU"), ("bf16", "this CPU has no native bf16")],
)
def test_a_format_the_cpu_cannot_compute_is_refused(monkeypatch, requested, message):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    with pytest.raises(ValueError, match=message):
        precision.resolve_precision(requested, torch.device("cpu"))
