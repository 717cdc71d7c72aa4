"""The two x86 builds a CPU page measures, and the line that names the machine, the build and the threads.

A page measures one build. ``native``: the fused kernels built with ``-march=native`` (AVX-512 on an AVX-512 CPU)
and PyTorch as it runs here. ``avx2``: the AVX2 case on any AVX2-capable machine, an AVX-512 one included: the
kernels built with ``-march=x86-64-v3``, and PyTorch's own kernels held to AVX2 too, so that SDPA and every other
operation run as on an AVX2 CPU (AMD Zen 1-3, most Intel client CPUs): ATen's dispatch
(``ATEN_CPU_CAPABILITY``), MKL's GEMMs (``MKL_ENABLE_INSTRUCTIONS``) and oneDNN's (``ONEDNN_MAX_CPU_ISA``).
The baseline a ratio divides by is always measured under the same settings, in the same run.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILDS = {
    "native": {"TRA_CPU_MARCH": "native"},
    "avx2": {
        "TRA_CPU_MARCH": "x86-64-v3",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
}
# The settings an inherited environment must not carry into a build's measurements.
_CLEARED = ("TRA_CPU_MARCH", "TRA_CPU_CFLAGS", "TRA_CPU_KERNELS", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS",
            "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")  # fmt: skip


def environment(build: str | None, threads: int | None = None) -> dict:
    """The process environment of a measurement of ``build`` (None: this process's settings) at ``threads``
    OpenMP threads, if given."""
    if build is None:
        env = dict(os.environ)
    else:
        env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
        env.update(BUILDS[build])
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def probe() -> dict:
    """What this process runs on: the CPU, the kernels' build (building them if needed), PyTorch's vector path."""
    import torch

    from tra_attn.ops.tra import cpu_build
    from tra_attn.utils.cpu_info import cpu_info

    found = cpu_build.kernels()
    return {"cpu": cpu_info().describe(), "kernels": cpu_build.describe_build(found) if found else None,
            "torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability()}  # fmt: skip


_PROBE = "import json, sys; sys.path.insert(0, 'benchmarks'); import cpu_builds; print(json.dumps(cpu_builds.probe()))"


def in_build(build: str | None) -> bool:
    """Whether this process already runs with ``build``'s settings (None: whatever they are)."""
    return build is None or all(os.environ.get(k) == v for k, v in BUILDS[build].items())


def describe(build: str | None, threads: int) -> str:
    """One line: the CPU (model, family, instruction sets), the kernels' build, PyTorch's vector paths, the threads
    (building the kernels of ``build`` if needed; None, or the build this process runs: measured in it)."""
    if in_build(build):
        found = probe()
    else:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=REPO,
                              env=environment(build), check=True)  # fmt: skip
        found = json.loads(done.stdout.strip().splitlines()[-1])
    settings = BUILDS[build] if build else {k: os.environ[k] for k in _CLEARED if k in os.environ}
    held = [f"{k}={v}" for k, v in settings.items() if k != "TRA_CPU_MARCH"]
    torch_paths = f"PyTorch's kernels on {found['capability']}" + (f" ({', '.join(held)})" if held else "")
    return (f"{found['cpu']}; fused kernels built for {found['kernels']}; {torch_paths}; {threads} thread(s); "
            f"torch {found['torch']}, Python {platform.python_version()}")  # fmt: skip
