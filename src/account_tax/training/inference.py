"""A trained classifier from the training output folder, and class probabilities for texts."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch
from peft import PeftModel
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from account_tax.data.label_map import LABEL_MAP, LabelMap
from account_tax.data.serialize import LABEL_ID, TEXT, read_split
from account_tax.errors import DataError
from account_tax.io import write_json
from account_tax.training.batching import length_batches
from account_tax.training.classifier import (
    TextClassifier,
    load_backbone,
    load_full_classifier,
    save_full_classifier,
)
from account_tax.training.head_init import embed_classes_without_rows
from account_tax.training.model import base_model_sha256, load_tokenizer, resolve_model_dir
from account_tax.training.precision import inference_dtype
from account_tax.training.temperature import fit_temperature, negative_log_likelihood, softmax
from account_tax.training.training_info import TRAINING_INFO, read_training_info

log = logging.getLogger(__name__)

T = TypeVar("T")

ADAPTER_CONFIG = "adapter_config.json"


class Classifier(NamedTuple):
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    labels: list[str]


def load_classifier(
    model_dir: Path | str, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> Classifier:
    """The model in eval mode: the base model named in training_info.json with the trained
    adapter, or, for a fully fine-tuned or merged model, the folder's own weights. In `dtype`,
    by default bf16 where the device computes it natively (see `precision.inference_dtype`)."""
    model_dir = Path(model_dir)
    dtype = dtype or inference_dtype(device)
    labels = LabelMap.read(model_dir / LABEL_MAP).labels
    tokenizer = load_tokenizer(model_dir)
    info = read_training_info(model_dir)
    head = info["settings"]["head"]
    if (model_dir / ADAPTER_CONFIG).is_file():
        trained_on = info.get("base_model_sha256")
        if trained_on is not None and base_model_sha256(info["base_model"]) != trained_on:
            raise DataError(
                f"{model_dir}: its adapter was trained on the files of {info['base_model']} as"
                " they were, and they differ now: train it again on them"
            )
        base_dir = resolve_model_dir(info["base_model"])
        base = TextClassifier(load_backbone(base_dir, dtype), labels, head)
        model = PeftModel.from_pretrained(base, model_dir)
    else:
        model = load_full_classifier(model_dir, labels, head, dtype)
    # The adapter too: peft loads a bf16 adapter as fp32 next to a bf16 base otherwise.
    return Classifier(model.to(device=device, dtype=dtype).eval(), tokenizer, labels)


def rewrite_head(
    model_dir: Path, rewrite: Callable[[torch.nn.Module, PreTrainedTokenizerBase], T]
) -> T:
    """Load the saved model, let `rewrite` change its head's rows in place, save it, and return
    what `rewrite` returned."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # fp32: the rows written are kept, and a fully trained model is saved whole.
    model, tokenizer, _ = load_classifier(model_dir, device, torch.float32)
    result = rewrite(model, tokenizer)
    model = model.cpu()
    if isinstance(model, PeftModel):
        model.save_pretrained(model_dir)
    else:
        save_full_classifier(model, model_dir)
    return result


def represent_unseen_classes(
    model_dir: Path, texts: list[str], rows: np.ndarray, max_length: int
) -> None:
    """Rewrite the saved head's rows of the classes without training rows from their texts as
    the trained model embeds them (see `head_init.embed_classes_without_rows`)."""
    rewrite_head(
        model_dir,
        lambda model, tokenizer: embed_classes_without_rows(
            model, tokenizer, texts, rows, max_length
        ),
    )
    log.info("%d class(es) without training rows represented by their text", int(rows.sum()))


def merge_adapter(adapter_dir: Path, merged_dir: Path) -> None:
    """A standalone copy with the adapter folded into the base weights: no peft needed to use it."""
    model, tokenizer, _ = load_classifier(adapter_dir, dtype=torch.float32)
    save_full_classifier(model.merge_and_unload(), merged_dir)
    tokenizer.save_pretrained(merged_dir)
    for name in (LABEL_MAP, TRAINING_INFO):
        shutil.copyfile(adapter_dir / name, merged_dir / name)


def predict_logits(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    batch_size: int = 64,
    max_length: int = 128,
) -> np.ndarray:
    """Class logits, [len(texts), num_labels] float32, rows in the order of `texts`."""
    return score_texts(model, tokenizer, texts, batch_size, max_length)[0]


Forward = Callable[[torch.Tensor, torch.Tensor], tuple[np.ndarray, np.ndarray]]
"""Token ids and attention mask of a batch in, its class logits and pooled embeddings out."""


def score_batches(
    forward: Forward,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    batch_size: int,
    max_length: int,
    shape: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """Class logits, [len(texts), labels], and pooled embeddings, [len(texts), hidden], both
    float32, rows in the order of `texts`, from `forward` (`shape`: labels and hidden size).

    Batches of texts of near-equal length (`length_batches`); the rows are put back in place.
    """
    labels, hidden_size = shape
    logits = np.empty((len(texts), labels), dtype=np.float32)
    embeddings = np.empty((len(texts), hidden_size), dtype=np.float32)
    if not texts:
        return logits, embeddings
    collate = DataCollatorWithPadding(tokenizer)
    input_ids = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
    for rows in length_batches([len(ids) for ids in input_ids], batch_size):
        batch = collate([{"input_ids": input_ids[row]} for row in rows])
        logits[rows], embeddings[rows] = forward(batch["input_ids"], batch["attention_mask"])
    return logits, embeddings


@torch.inference_mode()
def score_texts(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    batch_size: int = 64,
    max_length: int = 128,
) -> tuple[np.ndarray, np.ndarray]:
    """`score_batches` with the PyTorch model: one forward pass gives the prediction and its
    place in the evidence index."""
    model.eval()
    classifier = model.get_base_model() if isinstance(model, PeftModel) else model
    device = next(model.parameters()).device

    def forward(input_ids: torch.Tensor, attention_mask: torch.Tensor):
        pooled = classifier.embed(input_ids.to(device), attention_mask.to(device))
        logits = classifier.classifier(pooled)
        return logits.float().cpu().numpy(), pooled.float().cpu().numpy()

    shape = (classifier.config.num_labels, classifier.config.hidden_size)
    return score_batches(forward, tokenizer, texts, batch_size, max_length, shape)


def predict_probabilities(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    batch_size: int = 64,
    max_length: int = 128,
    temperature: float = 1.0,
) -> np.ndarray:
    """Class probabilities, softmax(logits / temperature), [len(texts), num_labels] float32."""
    logits = predict_logits(model, tokenizer, texts, batch_size, max_length)
    return softmax(logits, temperature).astype(np.float32)


def model_temperature(model_dir: Path | str) -> float:
    """The temperature fitted on the validation split after training (see `calibrate_model`)."""
    info = read_training_info(model_dir)
    if "calibration" not in info:
        raise DataError(
            f"{model_dir}: {TRAINING_INFO} has no calibration; the model was trained before "
            f"calibration existed: train it again (snakemake -R train)"
        )
    return float(info["calibration"]["temperature"])


def calibrate_model(model_dir: Path, validation: Path, batch_size: int = 64) -> dict[str, Any]:
    """Fit the model's temperature on the validation split and record it in training_info.json
    (and in the merged copy's, where there is one); return the calibration record.

    Done on the saved model, loaded as evaluate and predict load it, so what is fitted is what
    they will apply.
    """
    # On a GPU node the trainer's first device, so a large model's pass stays fast.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer, labels = load_classifier(model_dir, device)
    info = read_training_info(model_dir)
    split = read_split(validation, len(labels))
    started = time.perf_counter()
    logits = predict_logits(
        model, tokenizer, split[TEXT].to_list(), batch_size, info["settings"]["max_length"]
    )
    y_true = split[LABEL_ID].to_numpy()
    temperature = fit_temperature(logits, y_true)
    record = {
        "temperature": temperature,
        "fitted_on": "validation",
        "rows": split.height,
        "validation_nll_before": negative_log_likelihood(softmax(logits), y_true),
        "validation_nll_after": negative_log_likelihood(softmax(logits, temperature), y_true),
        "seconds": time.perf_counter() - started,
    }
    for folder in (model_dir, model_dir / "merged"):
        if (folder / TRAINING_INFO).is_file():
            write_json(folder / TRAINING_INFO, {**info, "calibration": record})
    log.info("calibration: temperature %.3f on %d validation rows", temperature, split.height)
    return record
