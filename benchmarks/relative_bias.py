"""The additive-bias kinds (T5, FIRE, KERPLE): fwd+bwd time and peak memory of the materialised path (``naive``)
against the path chunked over queries (``chunked``), with causal SDPA without a bias as the floor, in the same run.

B=1, H=8, D=64, fp32 on CPU (or CUDA with ``--device cuda``: peak memory from torch.cuda). Each measurement runs in
two fresh subprocesses: one times it (the best of ``--repeats`` after a warm-up), one measures the growth of its peak
RSS over a warm run (Linux: the peak is reset through /proc/self/clear_refs after the warm-up), with one malloc arena
and large blocks mapped on their own, so that the peak follows the live tensors (glibc's per-thread arenas otherwise
keep what the autograd thread freed; mapping every block would distort the time). A measurement estimated above
``--max-gb`` is skipped.

    OMP_NUM_THREADS=1 python benchmarks/relative_bias.py --out results/benchmarks/relative_bias_cpu.md
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
B, H, D = 1, 8, 64


def worker(kind: str, impl: str, s: int, chunk: int, device: str, repeats: int) -> dict:
    import torch
    import torch.nn.functional as F

    from tra_attn.ops import relative_bias
    from tra_attn.ops.fire import fire_attention
    from tra_attn.ops.kerple import kerple_attention
    from tra_attn.ops.t5 import t5_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, s, D, device=device, requires_grad=True) for _ in range(3))
    table = torch.randn(32, H, device=device, requires_grad=True)
    r1, r2 = (torch.rand(H, device=device, requires_grad=True) for _ in range(2))
    c, threshold = (torch.tensor(x, device=device, requires_grad=True) for x in (0.1, 512.0))
    mlp = [torch.randn(shape, device=device, requires_grad=True) for shape in ((32, 1), (32,), (H, 32), (H,))]
    relative_bias.CHUNK = chunk
    run = {
        "t5": lambda: t5_attention(q, k, v, table, 32, 128, impl=impl),
        "kerple": lambda: kerple_attention(q, k, v, r1, r2, impl=impl),
        "fire": lambda: fire_attention(q, k, v, c, threshold, mlp, impl=impl),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }[kind]

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    run().sum().backward()  # warm-up
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # the peak RSS (VmHWM) starts again from the current RSS
        base = rss_mb("VmRSS")
    best = float("inf")
    for _ in range(max(repeats, 1)):
        sync()
        start = time.perf_counter()
        run().sum().backward()
        sync()
        best = min(best, time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if device == "cuda" else rss_mb("VmHWM") - base
    return {"kind": kind, "impl": impl, "s": s, "chunk": chunk, "seconds": best, "peak_mb": peak}


def rss_mb(key: str) -> float:
    """VmRSS or VmHWM (the peak since the last reset) of this process, in MB."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(key))
    return int(line.split()[1]) / 1024


def estimated_gb(kind: str, impl: str, s: int, chunk: int) -> float:
    """A rough upper bound of the live fp32 tensors: the (rows, S) blocks of bias, scores and (FIRE) MLP hidden."""
    rows = s if impl == "naive" else min(chunk, s)
    per_entry = (32 * 3 if kind == "fire" else 0) + 6 * H
    return 4 * rows * s * per_entry / 2**30


def run_worker(kind, impl, s, chunk, device, repeats, env) -> dict | None:
    args = [sys.executable, __file__, "--worker", json.dumps([kind, impl, s, chunk, device, repeats])]
    done = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env={**os.environ, **env})
    if done.returncode:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


@functools.cache
def measure(kind, impl, s, chunk, device, repeats) -> dict | None:
    """The time of one subprocess and the peak memory of another (see the module's docstring)."""
    src = {"PYTHONPATH": str(REPO / "src")}
    timed = run_worker(kind, impl, s, chunk, device, repeats, src)
    mapped = {**src, "MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    peak = run_worker(kind, impl, s, chunk, device, 1, mapped if device == "cpu" else src)
    return None if timed is None or peak is None else {**timed, "peak_mb": peak["peak_mb"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096], help="sequence lengths")
    parser.add_argument("--chunk", type=int, default=256, help="queries per block of the chunked path")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs after a warm-up (the best is kept)")
    parser.add_argument("--max-gb", type=float, default=6.0, help="skip measurements estimated above this")
    parser.add_argument("--out", help="write the table (markdown) here")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*json.loads(args.worker))))
        return
    import torch

    from cpu_builds import describe
    from tra_attn.utils.provenance import git_commit

    threads = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
    command = " ".join(["python benchmarks/relative_bias.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [
        "# Additive-bias attention (T5, KERPLE, FIRE): materialised against chunked over queries, fwd+bwd",
        "",
        f"Command: `{threads}{command}`  ",
        f"Machine: {describe(None, torch.get_num_threads())}  ",
        f"Date: {datetime.now(timezone.utc):%Y-%m-%d}, commit {git_commit()}",
        "",
        f"B={B}, H={H}, D={D}, fp32, {args.device}, chunk {args.chunk} queries; time: best of {args.repeats} after a "
        "warm-up; memory: growth of the peak over a warm run (fresh processes, see the script).",
        "",
        "| kind | S | naive | chunked | SDPA, no bias |",
        "|---|---|---|---|---|",
    ]
    for kind in ("t5", "kerple", "fire"):
        for s in args.lengths:
            cells = []
            for k, impl in ((kind, "naive"), (kind, "chunked"), ("sdpa", "naive")):
                if estimated_gb(k, impl, s, args.chunk) > args.max_gb:
                    cells.append("skipped (memory)")
                    continue
                r = measure(k, impl, s, args.chunk if k != "sdpa" else 0, args.device, args.repeats)
                cells.append("failed" if r is None else f"{r['seconds']:.3f} s / {r['peak_mb']:,.0f} MB")
            lines.append(f"| {kind} | {s} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
