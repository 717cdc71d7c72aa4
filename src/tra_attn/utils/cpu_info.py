"""What CPU this is: its model, vendor and family, and the vector instruction sets it has (from /proc/cpuinfo on
Linux). Every CPU speed figure names them: a kernel's speed is a property of the instruction set it runs on."""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path

# The instruction sets a page names, in order of preference; aarch64's "asimd" is NEON.
INSTRUCTION_SETS = ("avx512f", "avx2", "fma", "neon", "sve")


@dataclass(frozen=True)
class CPUInfo:
    model: str
    vendor: str
    family: str  # x86: "family F model M"; aarch64: "implementer I part P"; else ""
    machine: str  # platform.machine(): x86_64, aarch64, ...
    flags: frozenset[str]

    @property
    def instruction_sets(self) -> list[str]:
        return [name for name in INSTRUCTION_SETS if name in self.flags]

    def has(self, instruction_set: str) -> bool:
        return instruction_set in self.flags

    def describe(self) -> str:
        """One line: the model, vendor and family, and the instruction sets."""
        origin = ", ".join(part for part in (self.vendor, self.family) if part)
        sets = ", ".join(self.instruction_sets) or "no vector extension listed"
        where = f"{origin}; {self.machine}" if origin else self.machine
        return f"{self.model} ({where}: {sets})"


def parse_cpuinfo(text: str, machine: str) -> CPUInfo:
    """The first processor's entries of a /proc/cpuinfo text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    if "asimd" in flags:
        flags.add("neon")
    family = ""
    if "cpu family" in fields:
        family = f"family {fields['cpu family']} model {fields.get('model', '?')}"
    elif "CPU implementer" in fields:
        family = f"implementer {fields['CPU implementer']} part {fields.get('CPU part', '?')}"
    model = fields.get("model name") or fields.get("Model") or fields.get("Hardware") or platform.processor() or machine
    return CPUInfo(model=model, vendor=fields.get("vendor_id", ""), family=family, machine=machine,
                   flags=frozenset(flags))  # fmt: skip


@functools.cache
def cpu_info() -> CPUInfo:
    """This machine's CPU (what ``platform`` knows where /proc/cpuinfo cannot be read)."""
    machine = platform.machine()
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"), machine)
    except OSError:
        return CPUInfo(model=platform.processor() or machine, vendor="", family="", machine=machine, flags=frozenset())
