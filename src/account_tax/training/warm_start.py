"""Warm start (`train.init_from`): training begins from a model this workflow exported, not from
the pretrained backbone alone. The old classes keep their ids and head rows, the adapter goes on
from where it was, new classes start from their text as the warm model embeds it, and the epochs
run on the rows that model has not learned plus a seeded replay of those it has, at peak rates
scaled down (`warm_start.learning_rate_factor`): the model has converged, and a fresh optimizer at
full rates would move every weight it touches."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl
import torch
from peft import PeftModel, get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file

from account_tax.data.label_map import LABEL_MAP, LabelMap
from account_tax.data.split import TRAINED_ROWS, read_trained_rows
from account_tax.errors import DataError
from account_tax.io import write_parquet
from account_tax.storage.manifest import MANIFEST
from account_tax.training.classifier import HEAD_WEIGHTS, TextClassifier
from account_tax.training.model import HEAD_MODULE, base_model_sha256
from account_tax.training.settings import TrainSettings
from account_tax.training.training_info import TRAINING_INFO, read_training_info

log = logging.getLogger(__name__)

ADAPTER_WEIGHTS = "adapter_model.safetensors"
HEAD_PREFIX = f"base_model.model.{HEAD_MODULE}."
# What a warm start must share with the model it starts from.
SAME_SETTINGS = ("model", "head")
# alpha too: the adapter's update is scaled by alpha / r, so another alpha changes the model.
SAME_LORA = ("enabled", "r", "alpha", "target_modules", "modules_to_save")


@dataclass(frozen=True)
class InitModel:
    folder: Path
    labels: list[str]
    trained: pl.DataFrame  # id, label

    @property
    def has_adapter(self) -> bool:
        return (self.folder / ADAPTER_WEIGHTS).is_file()


def read_init_model(folder: Path, settings: TrainSettings) -> InitModel:
    """The model to start from, checked against the settings: errors name the folder and the
    setting that differs."""
    missing = [
        name
        for name in (TRAINING_INFO, LABEL_MAP, TRAINED_ROWS, MANIFEST)
        if not (folder / name).is_file()
    ]
    if missing:
        raise DataError(
            f"{folder}: not a model this workflow exported (train.init_from): no {missing}"
        )
    info = read_training_info(folder)
    was = info["settings"]
    differs = [f"train.{key}" for key in SAME_SETTINGS if was[key] != getattr(settings, key)]
    now_lora = settings.lora.to_dict()
    differs += [f"train.lora.{key}" for key in SAME_LORA if was["lora"][key] != now_lora[key]]
    if differs:
        raise DataError(
            f"{folder}: trained with other {differs} than this run's; a warm start continues"
            " the same model (set train.init_from: none to train afresh)"
        )
    if info.get("base_model_sha256") not in (None, base_model_sha256(settings.model)):
        raise DataError(
            f"{folder}: trained on the files of {settings.model} as they were; they differ now,"
            " and a warm start continues the same model (set train.init_from: none to train"
            " afresh)"
        )
    labels = LabelMap.read(folder / LABEL_MAP).labels
    return InitModel(folder, labels, read_trained_rows(folder))


def warm_start_settings(settings: TrainSettings, counts: dict[str, int]) -> TrainSettings:
    """The settings a warm start trains with (`counts` from `rows_to_learn`): one epoch where
    the new rows are few next to the learned ones (`one_epoch_below`), else its `epochs`, and
    both peak rates scaled down."""
    warm = settings.warm_start
    few = counts["new_rows"] < warm.one_epoch_below * counts["learned_rows"]
    if few:
        log.info(
            "warm start: %d new rows are under %g of the %d learned (one_epoch_below): one epoch",
            counts["new_rows"],
            warm.one_epoch_below,
            counts["learned_rows"],
        )
    factor = warm.learning_rate_factor
    head_rate = settings.head_learning_rate
    return replace(
        settings,
        epochs=1 if few else warm.epochs,
        learning_rate=settings.learning_rate * factor,
        head_learning_rate=None if head_rate is None else head_rate * factor,
    )


def check_label_ids(init: InitModel, labels: list[str], label_map: Path) -> None:
    """The old model's classes must keep their ids: features numbers new classes after them."""
    if labels[: len(init.labels)] != init.labels:
        raise DataError(
            f"{label_map}: its first {len(init.labels)} labels are not {init.folder}'s in its"
            " order; features keeps them when it is given that model's label map"
            " (--init-model, as the workflow does for train.init_from)"
        )


def label_names(frame: pl.DataFrame, labels: list[str]) -> pl.Series:
    return pl.Series(labels, dtype=pl.String).gather(frame["label_id"])


def rows_to_learn(
    frame: pl.DataFrame, labels: list[str], init: InitModel, replay_ratio: float, seed: int
) -> tuple[pl.DataFrame, dict[str, int]]:
    """The training rows the old model has not learned (new ids, or ids whose label changed: a
    correction) and `replay_ratio` times as many of the others, drawn with `seed`; in the
    split's order. Also the counts."""
    keyed = frame.with_columns(label_names(frame, labels).alias("_label"))
    learned = init.trained.select(
        pl.col("id").cast(pl.String), pl.col("label").alias("_label"), pl.lit(True).alias("_known")
    ).unique()
    keyed = keyed.with_columns(pl.col("id").cast(pl.String)).join(
        learned, on=["id", "_label"], how="left", maintain_order="left"
    )
    known = keyed["_known"].fill_null(False).to_numpy()
    new_rows = np.flatnonzero(~known)
    old_rows = np.flatnonzero(known)
    replayed = min(len(old_rows), round(replay_ratio * len(new_rows)))
    rng = np.random.default_rng(seed)
    chosen = np.sort(np.concatenate([new_rows, rng.choice(old_rows, replayed, replace=False)]))
    counts = {
        "new_rows": len(new_rows),
        "learned_rows": len(old_rows),
        "replayed_rows": replayed,
    }
    log.info(
        "warm start from %s: %d new or relabelled rows, %d of the %d it learned replayed",
        init.folder,
        counts["new_rows"],
        replayed,
        len(old_rows),
    )
    return frame[chosen], counts


def learned_rows(frame: pl.DataFrame, labels: list[str], init: InitModel | None) -> pl.DataFrame:
    """What the exported model has learned: the training split's rows, with their labels, and
    the old model's rows that the split does not relabel."""
    rows = frame.select(pl.col("id").cast(pl.String)).with_columns(
        label_names(frame, labels).alias("label")
    )
    if init is not None:
        older = init.trained.select(pl.col("id").cast(pl.String), "label")
        rows = pl.concat([older.join(rows, on="id", how="anti"), rows])
    return rows


def write_learned_rows(rows: pl.DataFrame, folder: Path) -> None:
    write_parquet(rows, folder / TRAINED_ROWS)


def head_state(init: InitModel) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The old head's tensors and the old adapter's (empty for a fully trained model)."""
    if not init.has_adapter:
        return load_file(init.folder / HEAD_WEIGHTS), {}
    state = load_file(init.folder / ADAPTER_WEIGHTS)
    head = {k.removeprefix(HEAD_PREFIX): v for k, v in state.items() if k.startswith(HEAD_PREFIX)}
    adapter = {k: v for k, v in state.items() if not k.startswith(HEAD_PREFIX)}
    return head, adapter


@torch.no_grad()
def copy_head_rows(model: TextClassifier, head: dict[str, torch.Tensor], old: int) -> None:
    """The head's first `old` rows (and its shared values, a cosine head's scale) become the
    old model's."""
    current = dict(model.classifier.named_parameters())
    if set(head) != set(current):
        raise DataError(f"the old head has {sorted(head)}, this one {sorted(current)}")
    for name, tensor in head.items():
        target = current[name]
        if tensor.shape == target.shape and tensor.shape[0] != old:
            target.copy_(tensor)
        elif tensor.shape[0] == old and tensor.shape[1:] == target.shape[1:]:
            target[:old] = tensor.to(target.dtype)
        else:
            raise DataError(
                f"the old head's {name} is {tuple(tensor.shape)}, not {old} rows of this one's"
                f" {tuple(target.shape)}"
            )


def load_adapter(model: torch.nn.Module, adapter: dict[str, torch.Tensor], folder: Path) -> None:
    """The old adapter's weights into the new peft model (the head is set before peft wraps it)."""
    if not isinstance(model, PeftModel):
        return
    # The head in the model already holds the old rows and the new ones: it is kept.
    result = set_peft_model_state_dict(model, {**get_peft_model_state_dict(model), **adapter})
    if result.unexpected_keys:
        raise DataError(f"{folder}: adapter weights this model lacks: {result.unexpected_keys[:5]}")
