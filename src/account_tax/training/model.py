"""Any local Hugging Face model folder, encoder or decoder, as a classifier of account codes to
train: its tokenizer, the backbone with a new head, adapters."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, TaskType, get_peft_model
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedTokenizerBase

from account_tax.errors import DataError
from account_tax.io import resolve_input, sha256_file
from account_tax.training.classifier import TextClassifier, load_backbone
from account_tax.training.settings import LoraSettings

log = logging.getLogger(__name__)

GGUF_SUFFIX = ".gguf"


def resolve_model_dir(spec: str) -> Path:
    """A model folder: a path, or `pkg:<package>/<folder>` inside an installed package; or a GGUF
    file (path or `pkg:`), converted once into a model folder (see `gguf_model_dir`).

    `resolve_input` locates files, so the folder is found through the file every model has.
    """
    if spec.endswith(GGUF_SUFFIX):
        return gguf_model_dir(resolve_input(spec))
    config = resolve_input(f"{spec.rstrip('/')}/config.json")
    if not config.is_file():
        raise DataError(f"{spec}: not a model folder (no config.json at {config})")
    return config.parent


MODEL_FILE_SUFFIXES = (".json", ".safetensors", ".bin", ".txt", ".model")
"""The files of a model folder that make the model: config, weights, tokenizer."""


def base_model_sha256(spec: str) -> str:
    """What a model trained on the pretrained model `spec` (`train.model`) depends on, as one
    sha256: a GGUF file's content, or the names and contents of a folder's config, weight and
    tokenizer files; where it lies is no part of it."""
    if spec.endswith(GGUF_SUFFIX):
        return sha256_file(resolve_input(spec))
    folder = resolve_model_dir(spec)
    files = sorted(f for f in folder.iterdir() if f.is_file() and f.suffix in MODEL_FILE_SUFFIXES)
    contents = {f.name: sha256_file(f) for f in files}
    return hashlib.sha256(json.dumps(contents, sort_keys=True).encode()).hexdigest()


def gguf_model_dir(gguf_file: Path) -> Path:
    """The GGUF file's model (dequantised, float32) and tokenizer as a Hugging Face folder in the
    user's cache, keyed by the file's content; converted on first use.

    transformers reads GGUF in every `from_pretrained` (seconds to a minute each, in every stage
    that loads the base), and refuses to save a model loaded from it ("quantized with gguf"), so
    the weights move into a model built from the same config without the quantization entry.
    """
    if not gguf_file.is_file():
        raise DataError(f"{gguf_file}: no such GGUF file")
    digest = hashlib.sha256()
    with gguf_file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = cache / "account-tax" / "models" / f"{gguf_file.stem}-{digest.hexdigest()[:16]}"
    if (folder / "config.json").is_file():
        return folder
    log.info("converting %s into a model folder at %s", gguf_file, folder)
    source, name = gguf_file.parent, gguf_file.name
    loaded = AutoModel.from_pretrained(source, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config
    model = AutoModel.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(
        dir=folder.parent, prefix=f".{folder.name}-", ignore_cleanup_errors=True
    ) as tmp:
        model.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(source, gguf_file=name).save_pretrained(tmp)
        try:
            os.rename(tmp, folder)
        except OSError:
            # Another process (a second rank) converted it at the same time.
            if not (folder / "config.json").is_file():
                raise
    return folder


def load_tokenizer(model_dir: Path) -> PreTrainedTokenizerBase:
    """The model's tokenizer, with a pad token: decoders often have none and pad with eos."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise DataError(f"{model_dir}: the tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_max_length(max_length: int, model_dir: Path, tokenizer: PreTrainedTokenizerBase) -> None:
    """`train.max_length` within the positions the model has: a longer text would fail inside
    its embeddings, at the first record that long (in training, or in predict)."""
    limits = [getattr(AutoConfig.from_pretrained(model_dir), "max_position_embeddings", None)]
    # A tokenizer without a limit of its own says so with a huge number.
    limits.append(tokenizer.model_max_length if tokenizer.model_max_length < 10**6 else None)
    limit = min((n for n in limits if n), default=None)
    if limit is not None and max_length > limit:
        raise DataError(
            f"config `train.max_length` is {max_length}, but the model in {model_dir} takes at"
            f" most {limit} tokens: set it to {limit} or less"
        )


HEAD_MODULE = "classifier"
"""The head's name in `TextClassifier`; peft trains and saves a module of that name in full."""


def fully_trained_modules(lora: LoraSettings) -> tuple[str, ...]:
    """The head and the modules the settings train in full beside the adapters."""
    return (HEAD_MODULE, *(lora.modules_to_save or ()))


def is_head_parameter(name: str, lora: LoraSettings) -> bool:
    """Whether a parameter belongs to the head or another module trained in full."""
    fully_trained = fully_trained_modules(lora)
    return any(part in fully_trained for part in name.split("."))


def build_model(model_dir: Path, labels: list[str], head: str) -> TextClassifier:
    """The pretrained backbone with a new head for `labels`, in float32 (the optimizer's master
    copy, whatever the checkpoint's dtype)."""
    return TextClassifier(load_backbone(model_dir), labels, head)


def add_lora(model: TextClassifier, lora: LoraSettings) -> PeftModel:
    """Freeze the model and train low-rank adapters plus the head and `modules_to_save` in full.

    The sequence-classification task type makes peft train and save the head in full, and
    without `target_modules` it picks the attention projections of the backbone's architecture
    (query/value, q_proj/v_proj).
    """
    config = LoraConfig(
        task_type=TaskType.SEQ_CLS,
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules) if lora.target_modules else None,
        modules_to_save=list(fully_trained_modules(lora)),
    )
    return get_peft_model(model, config)


def prepare_for_training(
    model: TextClassifier, lora: LoraSettings, gradient_checkpointing: bool
) -> torch.nn.Module:
    """Activation checkpointing and adapters as the settings ask; logs what is trained."""
    if gradient_checkpointing:
        # Non-reentrant checkpointing passes gradients through frozen embeddings to the adapters.
        model.backbone.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    head = type(model.classifier).__name__
    trained: torch.nn.Module = add_lora(model, lora) if lora.enabled else model
    trainable = sum(p.numel() for p in trained.parameters() if p.requires_grad)
    total = sum(p.numel() for p in trained.parameters())
    log.info(
        "model %s (%s, %s pooling, %s): %d of %d parameters trainable (%s)",
        model.config.name_or_path,
        model.config.model_type,
        model.pooling,
        head,
        trainable,
        total,
        "LoRA" if lora.enabled else "full fine-tuning",
    )
    return trained
