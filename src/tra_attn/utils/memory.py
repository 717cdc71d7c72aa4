"""How much memory this process may still take, so that work too large for it is refused before it starts.

An allocation that does not fit ends in the allocator's own error (torch's ``DefaultCPUAllocator: can't
allocate memory``, numpy's ``MemoryError``), after minutes of work or with a traceback, or in the kernel's OOM
killer. A command that knows its size up front (``tra data``) compares an estimate with the tightest of the
limits below and refuses with both numbers. Linux only; elsewhere nothing is known and nothing is refused.

- ``MemAvailable`` of ``/proc/meminfo``: what the machine can give without swapping;
- the cgroup's limit (``memory.max`` of cgroup v2, ``memory.limit_in_bytes`` of v1) less its usage: a
  container's or a job's share (SLURM, Kubernetes, systemd);
- the address-space and data-segment limits (``ulimit -v``, ``ulimit -d``) less what the process maps already.
"""

from __future__ import annotations

import re
import resource
from pathlib import Path

_TORCH_ALLOCATION = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _kib_field(text: str | None, name: str) -> int | None:
    """``name``'s value in bytes from a ``/proc`` table of "Name:   123 kB" lines."""
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key == name and value.split() and value.split()[0].isdigit():
            return int(value.split()[0]) * 1024
    return None


def _cgroup_room() -> int | None:
    """The process's cgroup limit less its usage (v2, then v1); None without a limit."""
    groups = _read("/proc/self/cgroup") or ""
    for line in groups.splitlines():
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":  # cgroup v2
            folder = f"/sys/fs/cgroup{path}".rstrip("/")
            limit, used = _read(f"{folder}/memory.max"), _read(f"{folder}/memory.current")
        elif "memory" in controllers.split(","):  # cgroup v1
            folder = f"/sys/fs/cgroup/memory{path}".rstrip("/")
            limit, used = _read(f"{folder}/memory.limit_in_bytes"), _read(f"{folder}/memory.usage_in_bytes")
        else:
            continue
        if limit and used and limit.isdigit() and used.isdigit() and int(limit) < 1 << 60:  # v1's "none": 2^63
            return max(0, int(limit) - int(used))
    return None


def memory_limits() -> dict[str, int]:
    """Bytes this process may still take under each limit that applies, by a name a user recognises."""
    limits = {}
    status = _read("/proc/self/status")
    available = _kib_field(_read("/proc/meminfo"), "MemAvailable")
    if available is not None:
        limits["the machine's available memory (MemAvailable)"] = available
    if (room := _cgroup_room()) is not None:
        limits["the cgroup's memory limit (memory.max)"] = room
    for name, limit, used in (
        ("ulimit -v", resource.RLIMIT_AS, "VmSize"),
        ("ulimit -d", resource.RLIMIT_DATA, "VmData"),
    ):
        soft = resource.getrlimit(limit)[0]
        mapped = _kib_field(status, used)
        if soft != resource.RLIM_INFINITY and mapped is not None:
            limits[f"the process's limit ({name})"] = max(0, soft - mapped)
    return limits


def human(size: float) -> str:
    """``size`` bytes as "6.4 TB" (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if size < 1000 or unit == "PB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def check_memory(needed: int, what: str, expected: str) -> None:
    """A ValueError before any work if ``needed`` bytes exceed the tightest limit of ``memory_limits``, naming
    ``what`` needs them, the limit and its room, and what is ``expected`` instead."""
    limits = memory_limits()
    if not limits:
        return
    name, room = min(limits.items(), key=lambda item: item[1])
    if needed > room:
        raise ValueError(
            f"{what}: about {human(needed)} of memory needed, and {name} leaves {human(room)}; expected {expected}"
        )


def out_of_memory(err: BaseException) -> str | None:
    """One line for an allocation the machine refused (numpy's ``MemoryError``, torch's ``DefaultCPUAllocator``
    error, which a size estimate missed), or None for any other error."""
    if isinstance(err, MemoryError):
        detail = str(err) or "an allocation failed"
    elif isinstance(err, RuntimeError) and (found := _TORCH_ALLOCATION.search(str(err))):
        detail = f"allocating {human(int(found.group(1)))} failed"
    else:
        return None
    limits = memory_limits()
    room = (
        f" ({min(limits.items(), key=lambda item: item[1])[0]} leaves {human(min(limits.values()))})" if limits else ""
    )
    return f"out of memory: {detail}{room}; expected a smaller job (fewer or shorter sequences, a smaller batch)"
