"""The `train` section of the workflow config as typed settings (views of `config.schema.yaml`,
which documents every key and holds its default)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from account_tax.settings import SectionView

EXTENSIONS_DIR = Path(".cache/torch_extensions")
"""Where DeepSpeed keeps the CPU communication module it compiles on first use (some 75 CPU
seconds), relative to the project: with the project, not in the home folder, and shared by the
runs a backtest starts in folders of their own."""

RUN_ONLY_KEYS = frozenset(
    {
        "dataloader",
        "checkpoint_every_steps",
        "segments",
        "merge_adapter",
        "max_minutes",
        "final_head",
    }
)
"""Settings that change how a run goes, not what it computes: a checkpoint stays resumable (a run
stopped by its time budget goes on from there with a larger one)."""


@dataclass(frozen=True)
class LoraSettings(SectionView):
    SECTION = "train.lora"
    enabled: bool
    r: int
    alpha: int
    dropout: float
    # None: peft's default for the architecture (BERT query/value, Llama-like q_proj/v_proj).
    target_modules: tuple[str, ...] | None
    # Trained in full beside the head.
    modules_to_save: tuple[str, ...] | None


@dataclass(frozen=True)
class DataLoaderSettings(SectionView):
    SECTION = "train.dataloader"
    num_workers: int
    timeout_s: float
    first_batch_timeout_s: float


@dataclass(frozen=True)
class EarlyStoppingSettings(SectionView):
    SECTION = "train.early_stopping"
    metric: str
    # Epochs without improvement before training stops; None: every epoch runs.
    patience: int | None
    min_delta: float

    def improves(self, value: float, best: float) -> bool:
        """Whether `value` beats `best` by more than min_delta (lower for a loss)."""
        if self.metric.endswith("loss"):
            return value < best - self.min_delta
        return value > best + self.min_delta


@dataclass(frozen=True)
class WarmStartSettings(SectionView):
    SECTION = "train.warm_start"
    epochs: int
    # One epoch instead where the new rows are fewer than this share of the learned ones.
    one_epoch_below: float
    # Old rows replayed per new row.
    replay_ratio: float
    # Both peak learning rates are multiplied by it.
    learning_rate_factor: float
    # The old model's evidence vectors are kept while the encoder's moved less (evidence.py).
    reuse_index_min_cosine: float


@dataclass(frozen=True)
class TrainSettings(SectionView):
    SECTION = "train"
    model: str
    max_length: int
    epochs: int
    max_minutes: float | None
    per_device_batch_size: int
    gradient_accumulation_steps: int
    learning_rate: float
    head_learning_rate: float | None
    warmup_ratio: float
    lr_schedule: str
    weight_decay: float
    seed: int
    head: str
    head_init: str
    # best, learned, prototypes, blend or refit (see training.prototypes).
    final_head: str
    # none, champion, or an exported model's folder.
    init_from: str
    warm_start: WarmStartSettings
    lora: LoraSettings
    gradient_checkpointing: bool
    compile: bool
    class_weight_alpha: float
    deepspeed_config: str
    backend: str
    precision: str
    group_by_length: bool
    checkpoint_every_steps: int
    segments: int
    dataloader: DataLoaderSettings
    merge_adapter: bool
    early_stopping: EarlyStoppingSettings

    def __post_init__(self) -> None:
        if self.merge_adapter and not self.lora.enabled:
            raise ValueError("train.merge_adapter needs train.lora.enabled (no adapter to merge)")
        if self.final_head in ("prototypes", "blend", "refit") and self.head != "cosine":
            raise ValueError(f"train.final_head: {self.final_head} needs train.head: cosine")
