"""The benchmark script's report logic, with the GPU measurements replaced (CI has no GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "attention.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("attention_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_report_layout_and_ratios(monkeypatch):
    bench = load_benchmark()
    timings = {"SDPA flash": 1.0, "TRA": 1.25}  # seconds; early exit: 0.5

    def fake_measure(fn, grad_out, repeats):
        seconds = timings.get(fn.__name__, 0.5)
        return {"fwd_s": seconds, "bwd_s": 2 * seconds, "peak_mb": 100.0}

    def fake_methods(q, k, v, g, prune_tau):
        def named(name):
            def fn():
                return None

            fn.__name__ = name
            return fn

        return {"SDPA flash": named("SDPA flash"), "TRA": named("TRA"), "TRA, early exit": named("prune")}

    monkeypatch.setattr(bench, "make_inputs", lambda b, h, s, d, dtype, device: [torch.zeros(1)] * 4)
    monkeypatch.setattr(bench, "gpu_methods", fake_methods)
    monkeypatch.setattr(bench, "measure", fake_measure)
    monkeypatch.setattr(bench, "gpu_correctness", lambda: ["| B=1 | 0 | 0 | 0 | 0 | 0 |"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    report = bench.gpu_report([2048], [64], repeats=2, prune_tau=10.0)
    lines = [line for line in report.splitlines() if line.startswith("| 2048 | 64 |")]
    assert len(lines) == 3
    tra = next(line for line in lines if "| TRA |" in line)
    assert "| 0.80x | 0.80x |" in tra  # SDPA time / TRA time, forward and backward
    flops = 2 * 8 * 32 * 2048**2 * 64  # B = 16384 / S = 8, H = 2048 / D = 32
    assert f"| {flops / 1.25 / 1e12:.0f} |" in tra
    assert "Fake GPU" in report and "python benchmarks/attention.py --device cuda" in report


def test_cpu_report_layout_and_ratios(monkeypatch):
    """Each thread count's section, the forgetting and the g = 0 columns, and ratios over SDPA of the same run."""
    bench = load_benchmark()
    import cpu_builds

    seconds = {"sdpa": 1.0, "cpu": 0.5, "chunked": 2.0, "naive": 8.0}

    def fake_worker(impl, s, b, h, d, repeats, threads=None, options=None, build="native", forgetting=True):
        t = seconds[impl] * (1.0 if forgetting else 1.6) / (threads or 1)
        return {"forward_s": t / 4, "seconds": t, "peak_rss_mb": 400.0, "rss_growth_mb": 50.0}

    monkeypatch.setattr(bench, "run_worker", fake_worker)
    monkeypatch.setattr(cpu_builds, "describe", lambda build, threads: f"Fake CPU; {build}; {threads} thread(s)")
    report = bench.cpu_report([1024], 3, [1, 2], "avx2", "python benchmarks/attention.py --build avx2")
    assert "# TRA attention on CPU (avx2 build)" in report and "Machine: Fake CPU; avx2  " in report
    assert "## 1 thread\n" in report and "## 2 threads\n" in report
    forward = [line for line in report.splitlines() if line.startswith("| 1024 | 0.250 s |")]
    assert forward == ["| 1024 | 0.250 s | 0.125 s | 0.50x | 0.200 s | 0.80x | 0.500 s | 2.00x |"]
