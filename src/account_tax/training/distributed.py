"""One process per device: the launch environment, the process group, and barriers.

`torchrun --nproc_per_node N scripts/train.py` sets the rendezvous variables; a plain
`python scripts/train.py` gets defaults for a group of one, because without them DeepSpeed looks
for MPI and fails.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import NoReturn

import deepspeed
import torch
import torch.distributed as dist

from account_tax.ports import free_ports
from account_tax.training.settings import EXTENSIONS_DIR


@dataclass(frozen=True)
class Distributed:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def set_launch_defaults() -> None:
    """Fill what torchrun would set, and keep compiled extensions and tokenizers in line."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    # A free port, not a fixed one: two single-process jobs may run side by side.
    os.environ.setdefault("MASTER_PORT", str(free_ports(1)[0]))
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_DIR.resolve()))
    # Rust tokenizer threads and forked DataLoader workers deadlock; tokenization is done up front.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def init_distributed() -> Distributed:
    set_launch_defaults()
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    deepspeed.init_distributed(dist_backend=backend)
    return Distributed(dist.get_rank(), local_rank, dist.get_world_size(), device)


def barrier() -> None:
    dist.barrier()


def broadcast_from_main(value: object) -> object:
    """Rank 0's value on every rank (a collective: every rank calls it)."""
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_from_all(value: object) -> list[object]:
    """Every rank's value, in rank order, on every rank (a collective)."""
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def exit_worker() -> NoReturn:
    """End a finished worker rank (not rank 0, which writes every output): flush its logs and
    leave without the interpreter's teardown. FSDP's DTensor caches keep the gloo process group
    and its threads alive past `destroy_process_group`, and tearing them down at exit once
    aborted a worker ("terminate called without an active exception") while rank 0 was still
    sealing the model."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
