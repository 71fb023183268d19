"""A trained classifier from the training output folder, and class probabilities for texts."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from peft import PeftModel
from transformers import DataCollatorWithPadding, PreTrainedModel, PreTrainedTokenizerBase

from account_tax.model import (
    LABEL_MAP,
    TRAINING_INFO,
    load_sequence_classifier,
    load_tokenizer,
    resolve_model_dir,
)

ADAPTER_CONFIG = "adapter_config.json"


class Classifier(NamedTuple):
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    labels: list[str]


def load_classifier(
    model_dir: Path | str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> Classifier:
    """The model in eval mode: the base model named in training_info.json with the trained
    adapter, or, for a fully fine-tuned or merged model, the folder's own weights."""
    model_dir = Path(model_dir)
    labels = json.loads((model_dir / LABEL_MAP).read_text(encoding="utf-8"))["labels"]
    tokenizer = load_tokenizer(model_dir)
    if (model_dir / ADAPTER_CONFIG).is_file():
        info = json.loads((model_dir / TRAINING_INFO).read_text(encoding="utf-8"))
        base_dir = resolve_model_dir(info["base_model"])
        base = load_sequence_classifier(base_dir, tokenizer, labels, dtype)
        model = PeftModel.from_pretrained(base, model_dir)
    else:
        model = load_sequence_classifier(model_dir, tokenizer, labels, dtype)
    return Classifier(model.to(device).eval(), tokenizer, labels)


def merge_adapter(adapter_dir: Path, merged_dir: Path) -> None:
    """A standalone copy with the adapter folded into the base weights: no peft needed to use it."""
    model, tokenizer, _ = load_classifier(adapter_dir)
    model.merge_and_unload().save_pretrained(merged_dir)
    tokenizer.save_pretrained(merged_dir)
    for name in (LABEL_MAP, TRAINING_INFO):
        shutil.copyfile(adapter_dir / name, merged_dir / name)


@torch.inference_mode()
def predict_probabilities(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    batch_size: int = 64,
    max_length: int = 128,
) -> np.ndarray:
    """Class probabilities, [len(texts), num_labels] float32, rows in the order of `texts`.

    Batches are formed from length-sorted texts (little padding) and the rows put back in place.
    """
    model.eval()
    device = next(model.parameters()).device
    collate = DataCollatorWithPadding(tokenizer)
    input_ids = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
    order = np.argsort([-len(ids) for ids in input_ids], kind="stable")
    probabilities = np.empty((len(input_ids), model.config.num_labels), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = collate([{"input_ids": input_ids[row]} for row in rows]).to(device)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        probabilities[rows] = torch.softmax(logits.float(), dim=-1).cpu().numpy()
    return probabilities
