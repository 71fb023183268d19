"""The head from the chart of accounts: each class's row starts as its text (`name: description`)
embedded by the backbone and pooled as a record is, and a class without training rows ends as its
text embedded by the trained model, so an account is reachable before it has a single posting."""

from __future__ import annotations

import logging
import time

import numpy as np
import torch
import torch.nn.functional as F
from peft import PeftModel
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from account_tax.data.label_map import LabelMap
from account_tax.training.classifier import TextClassifier

log = logging.getLogger(__name__)


def resolve_head_init(requested: str, label_map: LabelMap) -> str:
    """`auto`: from the class texts where the classes have names, random otherwise."""
    if requested != "auto":
        return requested
    return "label_text" if label_map.named else "random"


@torch.no_grad()
def embed_texts(
    model: TextClassifier,
    tokenizer: PreTrainedTokenizerBase,
    texts: list[str],
    max_length: int,
    batch_size: int = 64,
) -> torch.Tensor:
    """[len(texts), hidden] pooled embeddings, in the order of `texts`."""
    was_training = model.training
    model.eval()
    collate = DataCollatorWithPadding(tokenizer)
    encoded = tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    device = next(model.parameters()).device
    chunks = []
    for start in range(0, len(encoded), batch_size):
        batch = collate([{"input_ids": ids} for ids in encoded[start : start + batch_size]])
        batch = batch.to(device)
        chunks.append(model.embed(batch["input_ids"], batch["attention_mask"]).float())
    model.train(was_training)
    return torch.cat(chunks)


@torch.no_grad()
def write_rows(
    head: torch.nn.Module,
    rows: torch.Tensor,
    embeddings: torch.Tensor,
    norm: torch.Tensor,
    bias: float | torch.Tensor | None,
) -> None:
    """The head's `rows` (a boolean mask) become their embeddings at `norm`, with `bias` where
    the head has one (a cosine head has none)."""
    head.weight[rows] = (F.normalize(embeddings[rows], dim=1) * norm).to(head.weight.dtype)
    if hasattr(head, "bias") and bias is not None:
        head.bias[rows] = bias


@torch.no_grad()
def init_head_from_texts(
    model: TextClassifier, tokenizer: PreTrainedTokenizerBase, texts: list[str], max_length: int
) -> float:
    """Each row of the head becomes its class text's embedding, scaled to the norm the random
    initialisation gives a row (the norm the head's learning rate is tuned for); the bias starts
    at zero. Returns the seconds the embedding took."""
    started = time.perf_counter()
    embeddings = embed_texts(model, tokenizer, texts, max_length)
    head = model.classifier
    every = torch.ones(len(texts), dtype=torch.bool)
    write_rows(head, every, embeddings, head.weight.norm(dim=1).mean(), bias=0.0)
    seconds = time.perf_counter() - started
    log.info("head initialised from %d class texts in %.1f s", len(texts), seconds)
    return seconds


def text_classifier(model: torch.nn.Module) -> TextClassifier:
    """The TextClassifier inside a peft model (its backbone carries the adapters), or itself."""
    return model.base_model.model if isinstance(model, PeftModel) else model


def trained_head(model: torch.nn.Module) -> torch.nn.Module:
    """The head the model applies: under peft, its trained copy (modules_to_save)."""
    head = text_classifier(model).classifier
    return head.modules_to_save["default"] if hasattr(head, "modules_to_save") else head


@torch.no_grad()
def embed_classes_without_rows(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    texts: list[str],
    rows: np.ndarray,
    max_length: int,
) -> None:
    """Set the head's rows of the classes without training rows (`rows`, a boolean mask) to
    their texts as the trained model embeds them, so that they are compared with a record in the
    space the training moved records to. A linear head's rows get the mean norm and the mean bias
    of the trained rows, so that they compete on the same footing."""
    if not rows.any() or rows.all():
        return
    embeddings = embed_texts(text_classifier(model), tokenizer, texts, max_length)
    head = trained_head(model)
    held = torch.from_numpy(rows)
    bias = head.bias[~held].mean() if hasattr(head, "bias") else None
    write_rows(head, held, embeddings, head.weight[~held].norm(dim=1).mean(), bias)
