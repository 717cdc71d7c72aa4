"""Whether ``impl="auto"`` runs TRA on the fused CPU kernels: only where they are faster than the chunked path.

The kernels' speed is a property of the machine (the instruction set they were sized for, the cores, the
compiler), so it is measured on it: once per build, CPU and thread count, the first time ``auto`` needs to
know, both paths run at a representative shape (B=1, H=4, S=1024, D=64, fp32; forward under no_grad, then
forward and backward) with the gate at 0, which no walk ends early for: the kernels' slowest case. The
kernels are chosen if they are at least as fast as the chunked path in both. The verdict is stored in the
build's record (cpu_build.py), so later processes read it instead of measuring, in about half a second.

``TRA_CPU_KERNELS=1`` runs the kernels without measuring, ``TRA_CPU_KERNELS=0`` never builds them. ``status()``
says what was decided and why; ``tra kernels`` prints it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass

import torch

from ...utils.atomic import atomic_write_text
from ...utils.cpu_info import cpu_info
from .chunked import tra_chunked
from .contract import KeepRule
from .cpu_build import RECORD, SWITCH, Kernels, cpu_signature, describe_build, kernels, read_record, switch
from .fused_cpu import tra_cpu

SHAPE = (1, 4, 1024, 64)  # B, H, S, D of the measurement
REPEATS = 3


@dataclass(frozen=True)
class Timing:
    """Seconds (best of REPEATS) of each path at SHAPE, at ``threads`` threads."""

    threads: int
    shape: tuple[int, int, int, int]
    fused_forward: float
    chunked_forward: float
    fused_training: float
    chunked_training: float

    @property
    def kernels_win(self) -> bool:
        return self.fused_forward <= self.chunked_forward and self.fused_training <= self.chunked_training

    def describe(self) -> str:
        b, h, s, d = self.shape
        return (f"at {self.threads} thread(s), B={b} H={h} S={s} D={d} fp32: forward {self.fused_forward * 1e3:.1f} "
                f"ms against the chunked path's {self.chunked_forward * 1e3:.1f} ms, forward and backward "
                f"{self.fused_training * 1e3:.1f} ms against {self.chunked_training * 1e3:.1f} ms")  # fmt: skip


def _inputs():
    b, h, s, d = SHAPE
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.nn.functional.rms_norm(torch.randn(b, h, s, d, generator=gen), (d,)) for _ in range(2))
    v = torch.randn(b, h, s, d, generator=gen)
    log_gate = torch.zeros(b, h, s)  # no forgetting: every walk goes to the first key
    return q, k, v, log_gate


def _best(fn) -> float:
    fn()
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure() -> Timing:
    """Time both paths at SHAPE with this process's threads (with gradients, whatever mode the caller is in)."""
    with torch.inference_mode(False), torch.enable_grad(), torch.autocast("cpu", enabled=False):
        return _measure()


def _measure() -> Timing:
    q, k, v, g = _inputs()
    scale, keep = SHAPE[-1] ** -0.5, KeepRule()
    paths = {"fused": tra_cpu, "chunked": tra_chunked}
    seconds = {}
    for name, path in paths.items():

        def forward(path=path):
            with torch.no_grad():
                path(q, k, v, g, scale=scale, keep=keep)

        def training(path=path):
            inputs = [t.detach().requires_grad_() for t in (q, k, v, g)]
            path(*inputs, scale=scale, keep=keep).sum().backward()

        seconds[name] = (_best(forward), _best(training))
    return Timing(torch.get_num_threads(), SHAPE, seconds["fused"][0], seconds["chunked"][0], seconds["fused"][1],
                  seconds["chunked"][1])  # fmt: skip


def _machine_key(threads: int) -> str:
    return f"{hashlib.sha256(cpu_signature().encode()).hexdigest()[:12]}:{threads}"


def _stored(found: Kernels, threads: int) -> Timing | None:
    record = read_record(found.folder) or {}
    entry = (record.get("speed") or {}).get(_machine_key(threads))
    try:
        return Timing(**{**entry, "shape": tuple(entry["shape"])}) if entry else None
    except (TypeError, KeyError):
        return None


def _store(found: Kernels, timing: Timing) -> None:
    """Add the timing to the build's record (best effort: a read-only cache only costs a measurement later)."""
    record = read_record(found.folder)
    if record is None or record.get("library") != found.record["library"]:
        return
    record.setdefault("speed", {})[_machine_key(timing.threads)] = asdict(timing)
    with contextlib.suppress(OSError):
        atomic_write_text(found.folder / RECORD, json.dumps(record, indent=1) + "\n")


def forget_timing(found: Kernels) -> None:
    """Drop the stored measurement for this CPU at this process's thread count: the next ``timing`` measures."""
    timing.cache_clear()
    _chosen.cache_clear()
    record = read_record(found.folder)
    if record and (record.get("speed") or {}).pop(_machine_key(torch.get_num_threads()), None) is not None:
        atomic_write_text(found.folder / RECORD, json.dumps(record, indent=1) + "\n")


@functools.cache
def timing(threads: int) -> Timing | None:
    """The build's timing at ``threads`` threads: stored, else measured now (None without kernels)."""
    found = kernels()
    if found is None:
        return None
    stored = _stored(found, threads)
    if stored is not None and stored.shape == SHAPE:
        return stored
    measured = measure()
    _store(found, measured)
    return measured


@dataclass(frozen=True)
class Status:
    """What ``auto`` runs TRA on, on this CPU, and why."""

    uses_kernels: bool
    reason: str
    cpu: str
    build: str | None  # the kernels' instruction set, -march and compiler; None: no kernels
    library: str | None
    timing: Timing | None

    def describe(self) -> str:
        lines = [f"this CPU: {self.cpu}"]
        if self.library:
            lines += [f"fused CPU kernels: {self.library}", f"  built for {self.build}"]
        if self.timing:
            lines.append(f"  measured {self.timing.describe()}")
        chosen = "the fused CPU kernels" if self.uses_kernels else "the chunked PyTorch path"
        lines.append(f'impl="auto" runs TRA on {chosen}: {self.reason}')
        return "\n".join(lines)


def status() -> Status:
    """What ``auto`` chooses at this process's thread count (building and measuring the kernels if needed)."""
    mode, cpu = switch(), cpu_info().describe()
    found = kernels()
    if found is None:
        reason = "TRA_CPU_KERNELS=0" if mode == "0" else "the kernels could not be built or loaded (see the notice)"
        return Status(False, reason, cpu, None, None, None)
    build, library = describe_build(found), str(found.path)
    if mode == "1":
        return Status(True, "TRA_CPU_KERNELS=1 (not measured)", cpu, build, library, None)
    measured = timing(torch.get_num_threads())
    if measured.kernels_win:
        reason = "they are faster than the chunked path here"
    else:
        reason = "they are slower than the chunked path here (TRA_CPU_KERNELS=1 runs them anyway)"
    return Status(measured.kernels_win, reason, cpu, build, library, measured)


def use_kernels() -> bool:
    """Whether ``auto`` runs the fused kernels in this process (at its current thread count): asked per call of
    the op, so answered from a cache (a decoding step is a few microseconds of work per layer)."""
    return _chosen(torch.get_num_threads(), os.environ.get(SWITCH, ""))


@functools.cache
def _chosen(threads: int, setting: str) -> bool:
    mode = switch()
    if mode == "0" or kernels() is None:
        return False
    return mode == "1" or timing(threads).kernels_win
