"""Data-parallel training under torchrun: which process this is, its rows of every batch, and collectives.

``tra train`` started by ``torchrun --nproc_per_node N`` (or ``python -m torch.distributed.run``) sees
``WORLD_SIZE``/``RANK``/``LOCAL_RANK`` in its environment and joins a process group (gloo on CPU, NCCL
on CUDA). Every rank builds the same global batch (a pure function of seed and step) and trains on its
own contiguous slice of rows; DistributedDataParallel averages the gradients. Rank 0 alone validates,
logs and writes checkpoints. The global batch, not the number of processes, is part of the run's
config, so a run resumes on any number of processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Processes:
    """This process's place among the data-parallel ranks (one rank when not under torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def rows(self, batch_size: int) -> slice:
        """This rank's rows of a global batch of ``batch_size`` (a multiple of world_size)."""
        per_rank = batch_size // self.world_size
        return slice(self.rank * per_rank, (self.rank + 1) * per_rank)

    def device(self, device: str) -> str:
        """The config's device for this rank: ``cuda`` becomes ``cuda:LOCAL_RANK`` when distributed."""
        return f"cuda:{self.local_rank}" if self.distributed and device == "cuda" else device

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over ranks (every rank must call this at the same point)."""
        return self._all_reduce(value, dist.ReduceOp.SUM)

    def min(self, value: torch.Tensor) -> torch.Tensor:
        """``value``'s smallest over ranks (every rank must call this at the same point)."""
        return self._all_reduce(value, dist.ReduceOp.MIN)

    def _all_reduce(self, value: torch.Tensor, op) -> torch.Tensor:
        if self.distributed:
            value = value.clone()
            dist.all_reduce(value, op=op)
        return value

    def any(self, flag: bool, device: str) -> bool:
        """True on every rank if ``flag`` is True on any (e.g. an interrupt seen by one rank)."""
        return bool(self.sum(torch.tensor(float(flag), device=device)) > 0) if self.distributed else flag

    def max(self, value: int, device: str) -> int:
        """The largest of the ranks' ``value`` (e.g. the signal one rank received); no tensor for one process."""
        if not self.distributed:
            return value
        return int(self._all_reduce(torch.tensor(value, device=device), dist.ReduceOp.MAX))

    def broadcast(self, value):
        """Rank 0's ``value`` (any picklable object) on every rank."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, str(default))
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} = {value!r}; expected an integer (set by torchrun)") from None


def join(device: str) -> Processes:
    """This process's ranks from torchrun's environment, joining the process group if there are several."""
    world_size = _env_int("WORLD_SIZE", 1)
    if world_size <= 1:
        return Processes()
    processes = Processes(_env_int("RANK", 0), world_size, _env_int("LOCAL_RANK", 0))
    if not dist.is_initialized():
        cuda = torch.device(device).type == "cuda"
        if cuda:
            torch.cuda.set_device(processes.local_rank)
        dist.init_process_group("nccl" if cuda else "gloo")
    return processes


def leave(processes: Processes) -> None:
    """Leave the process group joined by ``join`` (no-op for one process)."""
    if processes.distributed and dist.is_initialized():
        dist.destroy_process_group()
