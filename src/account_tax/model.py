"""Any local Hugging Face model folder, encoder or decoder, as a classifier of account codes."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, TaskType, get_peft_model
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from account_tax.errors import DataError
from account_tax.io import resolve_input
from account_tax.train_settings import LoraSettings

log = logging.getLogger(__name__)

LABEL_MAP = "label_map.json"
TRAINING_INFO = "training_info.json"
"""Beside the trained weights: the base model it was trained from, and the settings."""


def read_training_info(model_dir: Path) -> dict[str, Any]:
    """A trained model folder's training_info.json."""
    return json.loads((Path(model_dir) / TRAINING_INFO).read_text(encoding="utf-8"))


def resolve_model_dir(spec: str) -> Path:
    """A model folder: a path, or `pkg:<package>/<folder>` inside an installed package.

    `resolve_input` locates files, so the folder is found through the file every model has.
    """
    config = resolve_input(f"{spec.rstrip('/')}/config.json")
    if not config.is_file():
        raise DataError(f"{spec}: not a model folder (no config.json at {config})")
    return config.parent


def load_tokenizer(model_dir: Path) -> PreTrainedTokenizerBase:
    """The model's tokenizer, with a pad token: decoders often have none and pad with eos."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise DataError(f"{model_dir}: the tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_sequence_classifier(
    model_dir: Path,
    tokenizer: PreTrainedTokenizerBase,
    labels: list[str],
    dtype: torch.dtype = torch.float32,
) -> PreTrainedModel:
    """The model with a classification head for `labels` (new, unless the folder has one).

    Decoders classify from the last token that is not padding, which they find through
    `pad_token_id`; encoders ignore it. Weights load as float32 by default: the optimizer's
    master copy, whatever the checkpoint's dtype.
    """
    return AutoModelForSequenceClassification.from_pretrained(
        model_dir,
        dtype=dtype,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: index for index, label in enumerate(labels)},
        pad_token_id=tokenizer.pad_token_id,
        use_cache=False,  # a classifier never generates: no key/value cache
    )


HEAD_MODULES = ("classifier", "score")
"""The classification head of BERT-like encoders and of decoders; peft always trains it in full."""


def modules_to_save(model: torch.nn.Module, lora: LoraSettings) -> tuple[str, ...]:
    """The modules trained in full besides the head: the settings', or else the pooler if any.

    BERT-like classifiers read the pooler's output, which sentence-embedding models such as
    all-MiniLM leave unused (they mean-pool): frozen, it hides most of what the adapters learn.
    """
    if lora.modules_to_save is not None:
        return lora.modules_to_save
    has_pooler = any(name.rsplit(".", 1)[-1] == "pooler" for name, _ in model.named_modules())
    return ("pooler",) * has_pooler


def is_head_parameter(name: str, fully_trained: tuple[str, ...]) -> bool:
    """Whether a parameter belongs to the head or another module trained in full."""
    return any(part in HEAD_MODULES or part in fully_trained for part in name.split("."))


def add_lora(model: PreTrainedModel, lora: LoraSettings) -> PreTrainedModel:
    """Freeze the model and train low-rank adapters plus the head and `modules_to_save` in full.

    The sequence-classification task type makes peft train and save the head (`classifier` in
    BERT-like models, `score` in decoders) in full, and without `target_modules` it picks the
    attention projections of the architecture (query/value, q_proj/v_proj).
    """
    config = LoraConfig(
        task_type=TaskType.SEQ_CLS,
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules) if lora.target_modules else None,
        modules_to_save=list(modules_to_save(model, lora)) or None,
    )
    return get_peft_model(model, config)


def build_model(
    model_dir: Path,
    tokenizer: PreTrainedTokenizerBase,
    labels: list[str],
    lora: LoraSettings,
    gradient_checkpointing: bool,
) -> PreTrainedModel:
    model = load_sequence_classifier(model_dir, tokenizer, labels)
    if gradient_checkpointing:
        # Non-reentrant checkpointing passes gradients through frozen embeddings to the adapters.
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    if lora.enabled:
        model = add_lora(model, lora)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    log.info(
        "model %s (%s): %d of %d parameters trainable (%s)",
        model_dir,
        model.config.model_type,
        trainable,
        total,
        "LoRA" if lora.enabled else "full fine-tuning",
    )
    return model
