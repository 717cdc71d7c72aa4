"""Build, verify and load the fused CPU kernels (``cpu/``: ``tra_cpu.cpp`` and its headers) on first use.

The kernels are plain C++ with OpenMP and no PyTorch headers: g++ builds them in seconds (an ATen extension
through ``torch.utils.cpp_extension`` takes a minute and needs ninja), and they are called through ctypes on the
tensors' memory. Their OpenMP resolves to the libgomp that torch has loaded (the same soname), so they share
torch's threads. ``-march=native`` sizes them to this CPU's instruction set (cpu/simd.h: AVX-512, AVX2, NEON or
generic vectors); ``TRA_CPU_MARCH`` names another target (``x86-64-v3``: the AVX2 build, which runs on any
AVX2 machine), ``TRA_CPU_CFLAGS`` adds compiler flags (split as a shell splits them), and so does ``$CXX``.

A build lives in ``<cache>/<key>/``, the key a hash of the sources, the flags, the compiler's version and, for
``-march=native``, the CPU: the library under a name that holds its checksum, and ``build.json``, written after
it, with its size and SHA-256. A library is loaded only if it matches its record, so a truncated or replaced file
is rebuilt, never loaded (a half-copied library would kill the process with SIGBUS). The compiler's output goes
to ``build.log`` beside them.

Where the kernels cannot be built or loaded (no C++ compiler, a failed build, a CPU without the build's
instruction set), ``library()`` returns None after one line on stderr that names the log, and the op runs on the
chunked PyTorch path. ``TRA_CPU_KERNELS=0`` switches the kernels off silently; whether ``auto`` runs them is
``cpu_choice.py``'s decision. The cache: ``$TRA_CPU_KERNELS_DIR``, else ``$XDG_CACHE_HOME/tra/cpu_kernels``,
else ``~/.cache/tra/cpu_kernels``.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...utils.atomic import atomic_write_text
from ...utils.cpu_info import cpu_info

SOURCE_DIR = Path(__file__).with_name("cpu")
ENTRY = SOURCE_DIR / "tra_cpu.cpp"
ABI_VERSION = 2  # tra_cpu_abi_version() of the source this module's bindings match
BASE_FLAGS = ("-O3", "-fopenmp", "-fno-math-errno", "-shared", "-fPIC", "-std=c++17")
SWITCH, MARCH, CFLAGS = "TRA_CPU_KERNELS", "TRA_CPU_MARCH", "TRA_CPU_CFLAGS"
RECORD = "build.json"
LOG = "build.log"
_MARCH_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_LIBRARY_NAME = re.compile(r"^libtra_cpu-[0-9a-f]{16}\.so$")


def cache_root() -> Path:
    if os.environ.get("TRA_CPU_KERNELS_DIR"):
        return Path(os.environ["TRA_CPU_KERNELS_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tra" / "cpu_kernels"


def switch() -> str:
    """``TRA_CPU_KERNELS``: "0" (off), "1" (on, whatever their speed) or "auto" (unset: on where they are faster
    than the chunked path, cpu_choice.py)."""
    value = os.environ.get(SWITCH, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{SWITCH} = {value!r}; expected 0 (off), 1 (on) or unset (on where faster than the "
                         "chunked path)")  # fmt: skip
    return value or "auto"


def compiler() -> tuple[str, ...] | None:
    """The C++ compiler's command: ``$CXX`` split into words as a shell would (``g++ -Wall`` is g++ with a flag),
    else g++ on the PATH (None: none found)."""
    if os.environ.get("CXX", "").strip():
        return tuple(shlex.split(os.environ["CXX"]))
    found = shutil.which("g++")
    return (found,) if found else None


@dataclass(frozen=True)
class Build:
    """What a build is made from: the compiler's command, the target (-march) and any extra flags."""

    cxx: tuple[str, ...]
    march: str = "native"
    extra: tuple[str, ...] = ()

    @classmethod
    def from_environment(cls, cxx: tuple[str, ...]) -> Build:
        march = os.environ.get(MARCH, "").strip() or "native"
        if not _MARCH_PATTERN.match(march):
            raise ValueError(f"{MARCH} = {march!r}; expected a -march value of the compiler, e.g. native, x86-64-v3")
        return cls(cxx, march, tuple(shlex.split(os.environ.get(CFLAGS, ""))))

    @property
    def flags(self) -> tuple[str, ...]:
        return (*BASE_FLAGS, f"-march={self.march}", *self.extra)

    def command(self, output: Path) -> list[str]:
        return [*self.cxx, *self.flags, str(ENTRY), "-o", str(output)]

    def compiler_version(self) -> str:
        """The first line of ``$CXX --version`` (raises OSError or SubprocessError if it cannot be run)."""
        done = subprocess.run([*self.cxx, "--version"], capture_output=True, text=True, timeout=60)
        return (done.stdout.strip().splitlines() or [""])[0]

    def key(self) -> str:
        """The build's folder name: a hash of everything the library depends on."""
        digest = hashlib.sha256()
        for path in sorted(SOURCE_DIR.iterdir()):
            if path.suffix in (".cpp", ".h"):
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        parts = [" ".join(self.cxx), " ".join(self.flags), self.compiler_version()]
        if self.march == "native":  # what -march=native stands for depends on the CPU
            parts.append(cpu_signature())
        for part in parts:
            digest.update(part.encode() + b"\0")
        return digest.hexdigest()[:16]


def cpu_signature() -> str:
    """The machine and the CPU's model and flags: what -march=native, and a speed measurement, depend on."""
    info = cpu_info()
    return f"{info.machine}|{info.model}|{info.vendor}|{info.family}|{' '.join(sorted(info.flags))}"


class BuildFailed(RuntimeError):
    """The kernels could not be built or loaded; the message is one line (it names the log, if any)."""


def read_record(folder: Path) -> dict | None:
    """The build's record, if it exists and parses."""
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def verified_library(folder: Path, record: dict | None) -> Path | None:
    """The record's library if its size and checksum match the record (None: missing, truncated, replaced)."""
    if not record or not isinstance(record.get("library"), str) or not _LIBRARY_NAME.match(record["library"]):
        return None
    path = folder / record["library"]
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) != record.get("bytes") or hashlib.sha256(data).hexdigest() != record.get("sha256"):
        return None
    return path


def compile_into(build: Build, folder: Path) -> dict:
    """Compile the kernels into ``folder`` and write their record; the record. The library is compiled to a
    temporary file and renamed to a name holding its checksum, and the record is written after it (atomically),
    so a concurrent or interrupted build never leaves a record that points at a partial library."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / LOG
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        partial = Path(tmp) / "libtra_cpu.so"
        command = build.command(partial)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired as error:
            raise BuildFailed(f"{build.cxx[0]} ran past {error.timeout:.0f} s") from error
        log.write_text(f"$ {shlex.join(command)}\n{done.stdout}{done.stderr}")
        if done.returncode != 0:
            errors = sum("error" in line for line in done.stderr.splitlines())
            raise BuildFailed(f"{build.cxx[0]} exited {done.returncode} with {errors} error line(s); "
                              f"its output is in {log}")  # fmt: skip
        data = partial.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        name = f"libtra_cpu-{sha[:16]}.so"
        os.replace(partial, folder / name)
    record = {
        "library": name,
        "bytes": len(data),
        "sha256": sha,
        "march": build.march,
        "flags": list(build.flags),
        "compiler": build.compiler_version(),
        "abi": ABI_VERSION,
    }
    atomic_write_text(folder / RECORD, json.dumps(record, indent=1) + "\n")
    for stale in folder.glob("libtra_cpu-*.so"):  # damaged or superseded libraries of this key
        if stale.name != name:
            stale.unlink(missing_ok=True)
    return record


@dataclass(frozen=True)
class Kernels:
    """A loaded build: the library, its folder and record, and the instruction set it was sized for."""

    lib: ctypes.CDLL
    folder: Path
    record: dict
    target: str  # tra_cpu_target(): avx512f, avx2, neon or generic

    @property
    def path(self) -> Path:
        return self.folder / self.record["library"]


def open_library(path: Path) -> tuple[ctypes.CDLL, str]:
    """Load a verified library and check it is the kernels this module binds, for an instruction set this CPU
    has: (library, target)."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as error:
        raise BuildFailed(f"{path} could not be loaded ({error}); remove it to rebuild") from error
    try:
        abi, target = lib.tra_cpu_abi_version, lib.tra_cpu_target
    except AttributeError as error:
        raise BuildFailed(f"{path} is not a library of the TRA kernels (no {error.args[0].split(':')[-1].strip()}); "
                          "remove it to rebuild") from error  # fmt: skip
    if abi() != ABI_VERSION:
        raise BuildFailed(f"{path}: ABI version {abi()}, expected {ABI_VERSION}; remove it to rebuild")
    target.restype = ctypes.c_char_p
    name = target().decode()
    if name in ("avx512f", "avx2", "neon") and not cpu_info().has(name):
        raise BuildFailed(f"{path} is built for {name} ({MARCH}={os.environ.get(MARCH, 'native')}), which this CPU "
                          f"lacks")  # fmt: skip
    return lib, name


def notice(message: str) -> None:
    print(f"tra_attn: {message}; TRA on CPU runs on the chunked PyTorch path", file=sys.stderr)


def build_and_load(build: Build) -> Kernels:
    """The build's kernels: loaded from the cache if they match their record, else (re)built first."""
    folder = cache_root() / build.key()
    record = read_record(folder)
    path = verified_library(folder, record)
    if path is None:
        record = compile_into(build, folder)
        path = folder / record["library"]
    lib, target = open_library(path)
    return Kernels(lib, folder, record, target)


@functools.cache
def kernels() -> Kernels | None:
    """The kernels, built if this source has not been built here before; None (after one notice) if they cannot
    be, or ``TRA_CPU_KERNELS=0``."""
    if switch() == "0":
        return None
    cxx = compiler()
    if cxx is None:
        notice("no C++ compiler found (g++, or $CXX) to build the fused CPU kernels")
        return None
    try:
        return build_and_load(Build.from_environment(cxx))
    except BuildFailed as error:
        notice(f"the fused CPU kernels could not be built or loaded: {error}")
    except (OSError, subprocess.SubprocessError) as error:
        notice(f"the fused CPU kernels could not be built in {cache_root()}: {error}")
    return None


def library() -> ctypes.CDLL | None:
    """The kernels' library, or None (see ``kernels``)."""
    found = kernels()
    return None if found is None else found.lib


def available() -> bool:
    return library() is not None


def describe_build(found: Kernels) -> str:
    """One line: the instruction set, -march (and any extra flags) and compiler of a build."""
    flags = " ".join(f for f in found.record.get("flags", []) if f not in BASE_FLAGS)
    return f"{found.target} ({flags or '?'}, {found.record.get('compiler', '?')})"
