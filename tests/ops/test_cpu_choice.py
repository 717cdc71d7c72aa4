"""What impl="auto" runs TRA on, on a CPU (ops/tra/cpu_choice.py): the fused kernels only where they are faster
than the chunked path, measured once per build and stored with it. A kernel made slow on purpose (built at -O0,
about 4x slower than the chunked path) is not run, unless TRA_CPU_KERNELS=1 says so; ``tra kernels`` says which
and why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler here"),
    pytest.mark.integration,
]

# Runs TRA with impl="auto" and says which path ran it.
AUTO = """
import torch
from tra_attn import threshold_relative_attention
from tra_attn.ops.tra import cpu_choice, dispatch
ran = []
fused = dispatch.tra_cpu
dispatch.tra_cpu = lambda *a, **k: ran.append(1) or fused(*a, **k)
q = torch.randn(1, 2, 100, 16)
threshold_relative_attention(q, q, q, -torch.rand(1, 2, 100))
print("ran", "fused" if ran else "chunked")
"""


def run(code_or_args, cache: Path, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TRA_CPU_")}
    environ.update(TRA_CPU_KERNELS_DIR=str(cache), OMP_NUM_THREADS="1", **env)
    command = [sys.executable, "-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=900)


TRA = [sys.executable, "-m", "tra_attn.cli"]


def record_of(cache: Path) -> dict:
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    return json.loads((folder / "build.json").read_text())


def test_a_slow_kernel_is_not_run_unless_forced(tmp_path):
    slow = {"TRA_CPU_CFLAGS": "-O0"}
    done = run(AUTO, tmp_path, **slow)
    assert done.returncode == 0 and "ran chunked" in done.stdout, done.stderr
    (timing,) = record_of(tmp_path)["speed"].values()  # measured once, stored with the build
    assert timing["threads"] == 1 and timing["fused_training"] > timing["chunked_training"]
    said = run(TRA + ["kernels"], tmp_path, **slow)
    assert "runs TRA on the chunked PyTorch path: they are slower" in said.stdout
    assert "-march=native -O0" in said.stdout
    forced = run(AUTO, tmp_path, TRA_CPU_KERNELS="1", **slow)
    assert "ran fused" in forced.stdout, forced.stderr
    assert "TRA_CPU_KERNELS=1 (not measured)" in run(TRA + ["kernels"], tmp_path, TRA_CPU_KERNELS="1", **slow).stdout


def test_the_measurement_is_read_back_not_repeated(tmp_path):
    """A later process reads the stored verdict (it would fail if it measured); --measure replaces it."""
    first = run(TRA + ["kernels", "--json"], tmp_path)
    assert first.returncode == 0, first.stderr
    verdict = json.loads(first.stdout)
    assert verdict["timing"]["threads"] == 1 and verdict["build"] is not None
    no_measuring = "from tra_attn.ops.tra import cpu_choice\ncpu_choice.measure = None\n" + AUTO
    again = run(no_measuring, tmp_path)
    assert again.returncode == 0 and ("ran fused" if verdict["uses_kernels"] else "ran chunked") in again.stdout
    remeasured = run(TRA + ["kernels", "--json", "--measure"], tmp_path)
    assert json.loads(remeasured.stdout)["timing"] != verdict["timing"]


def test_without_kernels_auto_runs_the_chunked_path_and_says_why(tmp_path):
    off = run(TRA + ["kernels"], tmp_path, TRA_CPU_KERNELS="0")
    assert 'impl="auto" runs TRA on the chunked PyTorch path: TRA_CPU_KERNELS=0' in off.stdout
    assert "ran chunked" in run(AUTO, tmp_path, TRA_CPU_KERNELS="0").stdout
    broken = run(TRA + ["kernels"], tmp_path, CXX="/nonexistent/g++")
    assert "could not be built or loaded" in broken.stdout and broken.stderr.count("chunked PyTorch path") == 1
