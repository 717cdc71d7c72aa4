"""Build and load the fused CPU kernels (``cpu/tra_cpu.cpp``) on first use, cached per source, compiler and CPU.

The kernels are plain C++ with OpenMP and no PyTorch headers: g++ builds them in a few seconds (an ATen extension
through ``torch.utils.cpp_extension`` takes a minute and needs ninja), and they are called through ctypes on the
tensors' memory. Their OpenMP resolves to the libgomp that torch has loaded (the same soname), so they share
torch's threads. ``-march=native`` tunes them to this CPU; the cache key holds the CPU's flags, so a cache shared
by another machine never runs code its CPU lacks.

Where they cannot be built (no C++ compiler, a failed build, ``TRA_CPU_KERNELS=0``), ``library()`` returns None
after one line on stderr, and the op runs on the chunked PyTorch path: never a silent slowdown, never a failure.
The cache: ``$TRA_CPU_KERNELS_DIR``, else ``$XDG_CACHE_HOME/tra/cpu_kernels``, else ``~/.cache/tra/cpu_kernels``.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("cpu") / "tra_cpu.cpp"
ABI_VERSION = 1  # tra_cpu_abi_version() of the source this module's bindings match
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-shared", "-fPIC", "-std=c++17")
ENV_SWITCH = "TRA_CPU_KERNELS"


def cache_root() -> Path:
    if os.environ.get("TRA_CPU_KERNELS_DIR"):
        return Path(os.environ["TRA_CPU_KERNELS_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tra" / "cpu_kernels"


def compiler() -> str | None:
    """The C++ compiler to build with: ``$CXX``, else g++ on the PATH (None: none found)."""
    return os.environ.get("CXX") or shutil.which("g++")


def cpu_signature() -> str:
    """What -march=native depends on: the machine and the CPU's model and feature flags."""
    lines = []
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith(("flags", "model name", "Features", "CPU part")) and line not in lines:
                    lines.append(line)
                if len(lines) >= 2:
                    break
    except OSError:
        pass
    return platform.machine() + "".join(lines)


def build_key(cxx: str) -> str:
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(FLAGS).encode(), version.encode(), cpu_signature().encode()):
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def build(cxx: str, target: Path) -> None:
    """Compile the kernels into ``target``, atomically: a temporary file renamed into place, so a concurrent or
    interrupted build never leaves a partial library."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        partial = Path(tmp) / target.name
        result = subprocess.run([cxx, *FLAGS, str(SOURCE), "-o", str(partial)], capture_output=True, text=True,
                                timeout=600)  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"{cxx} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
        os.replace(partial, target)


def notice(message: str) -> None:
    print(f"tra_attn: {message}; TRA on CPU runs on the chunked PyTorch path", file=sys.stderr)


@functools.cache
def library() -> ctypes.CDLL | None:
    """The kernels, built if this source has not been built here before; None (after one notice) if they cannot
    be, or ``TRA_CPU_KERNELS=0``."""
    if os.environ.get(ENV_SWITCH) == "0":
        return None
    cxx = compiler()
    if cxx is None:
        notice("no C++ compiler found (g++, or $CXX) to build the fused CPU kernels")
        return None
    try:
        target = cache_root() / build_key(cxx) / "libtra_cpu.so"
        if not target.is_file():
            build(cxx, target)
        lib = ctypes.CDLL(str(target))
        if lib.tra_cpu_abi_version() != ABI_VERSION:
            raise RuntimeError(f"{target}: ABI version {lib.tra_cpu_abi_version()}, expected {ABI_VERSION}")
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        notice(f"the fused CPU kernels could not be built or loaded ({error})")
        return None
    return lib


def available() -> bool:
    return library() is not None
