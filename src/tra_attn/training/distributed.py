"""Data-parallel training under torchrun: which process this is, its rows of every batch, and collectives.

``tra train`` started by ``torchrun --nproc_per_node N`` (or ``python -m torch.distributed.run``) sees
``WORLD_SIZE``/``RANK``/``LOCAL_RANK`` in its environment and joins a process group (gloo on CPU, NCCL
on CUDA). Every rank builds the same global batch (a pure function of seed and step) and trains on its
own contiguous slice of rows; DistributedDataParallel averages the gradients. Rank 0 alone validates,
logs and writes checkpoints. The global batch, not the number of processes, is part of the run's
config, so a run resumes on any number of processes.

Joining waits at most ``TRA_RENDEZVOUS_TIMEOUT`` seconds (default 300) for the other processes: a
``WORLD_SIZE``/``RANK`` left in the environment of a process started without torchrun fails with a clear
error instead of waiting for partners that never come.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout


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


RENDEZVOUS_TIMEOUT = "TRA_RENDEZVOUS_TIMEOUT"
DEFAULT_RENDEZVOUS_SECONDS = 300.0


def _rendezvous_seconds() -> float:
    value = os.environ.get(RENDEZVOUS_TIMEOUT, str(DEFAULT_RENDEZVOUS_SECONDS))
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(
            f"environment variable {RENDEZVOUS_TIMEOUT} = {value!r}; expected a positive number of seconds"
        )
    return seconds


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
        _init_process_group("nccl" if cuda else "gloo", processes)
    return processes


def _init_process_group(backend: str, processes: Processes) -> None:
    """torch's env:// rendezvous, bounded by TRA_RENDEZVOUS_TIMEOUT; the group's collectives keep torch's
    default timeout (a rank may wait long for rank 0 to write a checkpoint)."""
    seconds = _rendezvous_seconds()
    stray = f"WORLD_SIZE={processes.world_size} and RANK={processes.rank} are set"
    remedy = (
        "every process of the launch must start (check the other nodes)"
        if os.environ.get("TORCHELASTIC_RUN_ID")
        else "launch with torchrun, or unset WORLD_SIZE, RANK and LOCAL_RANK"
    )
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        unset = f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not"
        raise ValueError(f"{stray} but {unset}; expected the environment of torchrun: {remedy}")
    if not os.environ.get("TORCHELASTIC_RUN_ID"):  # not started by torchrun: perhaps a stray environment
        _announce_wait(processes, seconds)
    try:
        rendezvous = dist.rendezvous("env://", processes.rank, processes.world_size, timeout=timedelta(seconds=seconds))
        store, _, _ = next(rendezvous)
        dist.init_process_group(
            backend, store=dist.PrefixStore("default_pg", store), rank=processes.rank, world_size=processes.world_size
        )
    except dist.DistError as err:
        where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        raise ValueError(
            f"{stray} but no process group formed at {where} within {seconds:g} s ({RENDEZVOUS_TIMEOUT}): "
            f"{_first_line(err)}; expected the other processes of a torchrun launch: {remedy}"
        ) from None
    store.set_timeout(default_pg_timeout)  # as torch's own env:// rendezvous leaves it


def _announce_wait(processes: Processes, seconds: float) -> None:
    """One line on stderr, before the wait, saying what this process waits for: the other processes, where, for
    how long, and what to unset if none are coming (a WORLD_SIZE left in the environment would otherwise wait
    the whole timeout in silence). torchrun's workers start together and skip it."""
    others = processes.world_size - 1
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    sys.stderr.write(
        f"tra: WORLD_SIZE={processes.world_size} and RANK={processes.rank} are set: waiting up to {seconds:g} s "
        f"({RENDEZVOUS_TIMEOUT}) for the other {others} process{'es' if others > 1 else ''} of the run to join at "
        f"{where}; if no others are coming (not a torchrun launch), stop this one and unset WORLD_SIZE, RANK and "
        "LOCAL_RANK\n"
    )
    sys.stderr.flush()


def _first_line(err: BaseException) -> str:
    """The first sentence of a torch.distributed error, without the C++ source location gloo puts first."""
    text = re.sub(r"^\[[^\]]*:\d+\]\s*", "", str(err).strip())
    return text.splitlines()[0].split(". ")[0].rstrip(".") if text else type(err).__name__


def lost_peer(err: BaseException) -> str | None:
    """One line for a collective that failed because another process of the run stopped (it failed, and
    says why in its own output, or was killed); None for any other error."""
    world_size = os.environ.get("WORLD_SIZE", "1")
    if world_size in ("", "0", "1") or not isinstance(err, RuntimeError):
        return None
    if not (isinstance(err, dist.DistError) or "gloo" in str(err) or "NCCL" in str(err)):
        return None
    return (
        f"process {os.environ.get('RANK', '?')} of {world_size} lost the others (one of them failed or was "
        f"stopped: see its own message): {_first_line(err)}"
    )


def leave(processes: Processes) -> None:
    """Leave the process group joined by ``join`` (no-op for one process)."""
    if processes.distributed and dist.is_initialized():
        dist.destroy_process_group()
