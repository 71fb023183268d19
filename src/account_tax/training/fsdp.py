"""PyTorch FSDP2 (`fully_shard`) as the second training backend (`train.backend: fsdp`).

`FsdpEngine` offers the part of DeepSpeed's engine that the loop uses (call, backward, step,
get_lr, train/eval), so both backends run the same step, loss and evaluation. Every
parameter is sharded across the ranks (as ZeRO-3): each transformer layer is a unit of its own,
the rest of the model the root's. Under bf16 the frozen weights are stored in bf16 (as
DeepSpeed's bf16 mode stores them), the trained ones' shards stay fp32 (the optimizer's master
weights), each unit is gathered in bf16 for its forward and backward, and gradients are reduced
in fp32. The optimizer (AdamW, betas and eps) and the gradient clipping are the DeepSpeed file's,
so that a run differs by its backend alone.

Checkpoints are torch distributed checkpoints (`torch.distributed.checkpoint`): each rank writes
its shards of the trained weights and their Adam moments, and a load reshards them onto any
number of processes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from account_tax.training.distributed import Distributed

# Frozen base weights are neither checkpointed nor loaded: they come from the base model. Not
# strict on load, which would ask for them: load_checkpoint compares the trained names itself.
TRAINED_ONLY = StateDictOptions(ignore_frozen_params=True)
LOAD_TRAINED_ONLY = StateDictOptions(ignore_frozen_params=True, strict=False)
SCHEDULER_STATE = "scheduler.pt"


def layer_classes(model: torch.nn.Module) -> set[str]:
    """The class names of the transformer layers, as the Hugging Face model names them (the
    modules it never splits across devices)."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return names


class FsdpEngine:
    """A model sharded with `fully_shard`, its AdamW optimizer and schedule, and gradient
    accumulation: `step()` after every micro-batch updates the weights at the end of the
    accumulation window only, as DeepSpeed's does."""

    def __init__(
        self,
        model: torch.nn.Module,
        parameter_groups: Callable[[torch.nn.Module], list[dict[str, Any]]],
        ds_config: dict[str, Any],
        precision: str,
        accumulation: int,
        scheduler: Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler],
        dist: Distributed,
    ) -> None:
        if precision == "fp16":
            raise ValueError(
                "train.backend fsdp trains in bf16 or fp32; fp16 needs DeepSpeed's loss scaling"
            )
        optimizer = ds_config["optimizer"]
        if optimizer["type"].lower() != "adamw":
            raise ValueError(f"train.backend fsdp uses AdamW, not {optimizer['type']}")
        if precision == "bf16":
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            # Frozen weights are stored in bf16, as DeepSpeed's bf16 mode stores them: half the
            # memory, and no cast at every forward; the trained ones stay fp32 for the optimizer.
            for param in model.parameters():
                if not param.requires_grad:
                    param.data = param.data.to(torch.bfloat16)
        else:
            policy = MixedPrecisionPolicy()
        mesh = init_device_mesh(dist.device.type, (dist.world_size,))
        # fully_shard moves each unit to the device as it shards it: a GPU never holds the whole
        # model at once.
        layers = layer_classes(model)
        for module in model.modules():
            if type(module).__name__ in layers:
                fully_shard(module, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        self.module = model
        # After sharding: the optimizer holds the sharded parameters.
        self.optimizer = torch.optim.AdamW(
            parameter_groups(model),
            betas=tuple(optimizer["params"]["betas"]),
            eps=optimizer["params"]["eps"],
        )
        self.lr_scheduler = scheduler(self.optimizer)
        self.clipping = ds_config.get("gradient_clipping", 0.0)
        self.accumulation = accumulation
        self.micro_steps = 0
        # train.compile is refused under fsdp (see setup): batches are never padded to buckets.
        self.is_compiled = False

    def __call__(self, **inputs: torch.Tensor) -> Any:
        return self.module(**inputs)

    def train(self) -> None:
        self.module.train()

    def eval(self) -> None:
        self.module.eval()

    def get_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def backward(self, loss: torch.Tensor) -> None:
        """The micro-batch's share of the step's gradient; reduced across the ranks only at the
        last micro-batch of the window."""
        self.micro_steps += 1
        self.module.set_requires_gradient_sync(self.micro_steps % self.accumulation == 0)
        (loss / self.accumulation).backward()

    def step(self) -> None:
        if self.micro_steps % self.accumulation:
            return
        if self.clipping:
            trained = [p for p in self.module.parameters() if p.requires_grad]
            torch.nn.utils.clip_grad_norm_(trained, self.clipping)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.lr_scheduler.step()

    def trained_names(self) -> set[str]:
        return set(get_model_state_dict(self.module, options=TRAINED_ONLY))

    def save(self, directory: Path, is_main: bool) -> None:
        """Every rank writes its shards of the trained weights and their Adam moments; rank 0 the
        schedule (plain Python, the same on every rank). A checkpoint ends a whole step, so no
        micro-batch count is kept."""
        model_state, optimizer_state = get_state_dict(
            self.module, self.optimizer, options=TRAINED_ONLY
        )
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)
        if is_main:
            torch.save(self.lr_scheduler.state_dict(), directory / SCHEDULER_STATE)

    @staticmethod
    def saved_names(directory: Path) -> set[str]:
        """The trained weights a checkpoint holds, from its metadata."""
        metadata = dcp.FileSystemReader(directory).read_metadata()
        return {
            key.removeprefix("model.")
            for key in metadata.state_dict_metadata
            if key.startswith("model.")
        }

    def load(self, directory: Path) -> None:
        """Weights, Adam moments and schedule from a checkpoint written by any number of
        processes: each rank reads the parts of the shards it now holds."""
        model_state, optimizer_state = get_state_dict(
            self.module, self.optimizer, options=TRAINED_ONLY
        )
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=directory)
        set_state_dict(
            self.module,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
            options=LOAD_TRAINED_ONLY,
        )
        # Our own file, checked against the manifest's sha256; the schedule is plain Python.
        self.lr_scheduler.load_state_dict(
            torch.load(directory / SCHEDULER_STATE, weights_only=False)
        )
        for group, rate in zip(
            self.optimizer.param_groups, self.lr_scheduler.get_last_lr(), strict=True
        ):
            group["lr"] = rate

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every weight whole, on rank 0's CPU (a collective; the other ranks get nothing)."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(self.module, options=options)
