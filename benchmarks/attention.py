"""TRA attention benchmark: forward and fwd+bwd time and peak memory against PyTorch SDPA, in the same run.

CPU mode (default): B=1, H=8, D=64, fp32, S in {1k, 2k, 4k, 8k, 16k}, at 1 and 2 threads; TRA on the fused C++
kernels (``impl="cpu"``) with forgetting gates and without forgetting (g = 0: no walk ends early), on the chunked
PyTorch path and naive (where it fits in memory), against ``scaled_dot_product_attention(is_causal=True)``,
forward alone (what evaluation and generation pay, under no_grad) and forward+backward. A last table times the
training options (local window 4 with the keep surrogate, then with logit dropout too) on each path. Each
measurement runs in a fresh subprocess so that its peak RSS is its own. ``--build`` picks the kernels' build and
PyTorch's vector paths (benchmarks/cpu_builds.py): ``native``, or ``avx2`` (the AVX2 case, on any AVX2 machine).

    python benchmarks/attention.py --build native --out results/benchmarks/attention_cpu_native.md
    python benchmarks/attention.py --build avx2 --out results/benchmarks/attention_cpu_avx2.md

GPU mode: bf16, S in {2k, 4k, 8k, 16k}, D in {64, 128} (16k tokens per batch, d_model 2048): TFLOP/s
of the TRA Triton kernels (without and with early exit) against SDPA's flash backend, forward and
backward separately, and peak memory. FLOPs follow the FlashAttention convention: causal forward
2 * B * H * S^2 * D, backward 2.5x that. A packed row runs TRA on the same tokens cut into documents of
1024 (segment ids); its TFLOP/s use the same one-document count, so its ratio to the TRA row is the speed-up
from not attending across document boundaries.

    python benchmarks/attention.py --device cuda --out results/benchmarks/attention_gpu.md
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
PACKED_DOCUMENT = 1024  # tokens per document in the GPU mode's packed row


def make_inputs(b, h, s, d, dtype, device, seed=0, forgetting=True):
    import torch
    import torch.nn.functional as F

    from tra_attn.layers.norms import rms_normalize

    gen = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    q = rms_normalize(randn(b, h, s, d), 1e-6).requires_grad_()
    k = rms_normalize(randn(b, h, s, d), 1e-6).requires_grad_()
    v = randn(b, h, s, d).requires_grad_()
    # Gate pre-activations ~ N(-2, 1): a typical forgetting head (median log gate about -2.1); without forgetting,
    # g = 0: the weights do not decay with the count, and no walk of the fused kernels ends early.
    pre = randn(b, h, s).float()
    log_gate = (F.logsigmoid(pre - 2.0) if forgetting else torch.zeros_like(pre)).requires_grad_()
    return q, k, v, log_gate


TRAINING_OPTIONS = {  # name: the op's options, as the recommended TRA trains (and with dropout)
    "local 4 + surrogate 1": {"local_window": 4, "keep_surrogate": 1.0},
    "local 4 + surrogate 1 + dropout 0.1": {"local_window": 4, "keep_surrogate": 1.0, "logit_dropout": 0.1},
}


def worker(spec: dict) -> dict:
    """Time one implementation: the best of ``repeats`` forwards (no_grad) and fwd+bwd after one warm-up."""
    import torch
    import torch.nn.functional as F

    from tra_attn import threshold_relative_attention

    impl, s, b, h, d, repeats = (spec[key] for key in ("impl", "S", "B", "H", "D", "repeats"))
    options = spec.get("options", {})
    q, k, v, g = make_inputs(b, h, s, d, torch.float32, "cpu", forgetting=spec.get("forgetting", True))
    grad_out = torch.randn_like(q)

    def forward():
        if impl == "sdpa":  # no TRA options
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return threshold_relative_attention(q, k, v, g, impl=impl, **options)

    def forward_backward():
        forward().backward(grad_out)
        for t in (q, k, v, g):
            t.grad = None

    def no_grad_forward():
        with torch.no_grad():
            forward()

    # One thread: the process's CPU time, which a busy machine barely changes (time waiting for a core is not
    # counted); several threads: wall-clock time (CPU time would count the threads' spinning).
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    forward_backward()
    times = {"forward": [], "fwd_bwd": []}
    for _ in range(repeats):
        for name, fn in (("forward", no_grad_forward), ("fwd_bwd", forward_backward)):
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        **spec,
        "forward_s": min(times["forward"]),
        "seconds": min(times["fwd_bwd"]),
        "peak_rss_mb": peak / 1024,
        "rss_growth_mb": (peak - base_rss) / 1024,
    }


def run_worker(impl, s, b, h, d, repeats, threads: int | None = None, options: dict | None = None,
               build: str = "native", forgetting: bool = True) -> dict:  # fmt: skip
    from cpu_builds import environment

    spec = {"impl": impl, "S": s, "B": b, "H": h, "D": d, "repeats": repeats, "options": options or {},
            "forgetting": forgetting}  # fmt: skip
    env = environment(build, threads)
    cmd = [sys.executable, __file__, "--worker", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark worker {impl} S={s} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def naive_fits(s: int, b: int, h: int) -> bool:
    """The naive path holds about 8 (B, H, S, S) fp32 tensors; run it only within half the RAM."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return 8 * 4 * b * h * s * s < total / 2


def _cell(r, key="seconds"):
    return f"{r[key]:.3f} s / {r['peak_rss_mb']:,.0f} MB" if r else "does not fit"


def ratio(r, base, key="seconds") -> str:
    return f"{r[key] / base[key]:.2f}x"


def cpu_measurements(lengths, repeats, threads, build, training_lengths=(1024, 2048, 4096)) -> dict:
    """Every measurement of one thread count: the lengths' rows, the training options' rows, the memory check."""
    b, h, d = 1, 8, 64
    run = functools.partial(run_worker, b=b, h=h, d=d, repeats=repeats, threads=threads, build=build)
    rows = []
    for s in lengths:
        res = {impl: run(impl, s) for impl in ("sdpa", "cpu", "chunked")}
        res["cpu, g = 0"] = run("cpu", s, forgetting=False)
        if naive_fits(s, b, h):
            res["naive"] = run("naive", s)
        rows.append((s, res))
        print(json.dumps({k: round(v["seconds"], 4) for k, v in res.items()} | {"S": s, "threads": threads}),
              file=sys.stderr, flush=True)  # fmt: skip
    training = []
    for s in training_lengths:
        for name, options in TRAINING_OPTIONS.items():
            res = {impl: run(impl, s, options=options) for impl in ("sdpa", "cpu", "chunked")}
            if s <= 2048 and naive_fits(s, b, h):  # longer: minutes per call, and the memory tells already
                res["naive"] = run("naive", s, options=options)
            training.append((s, name, res))
            print(json.dumps({k: round(v["seconds"], 4) for k, v in res.items()} | {"S": s}), file=sys.stderr)
    checks = {impl: run_worker(impl, 8192, 1, 4, 64, 1, threads, build=build) for impl in ("cpu", "chunked")}
    return {"rows": rows, "training": training, "checks": checks}


def cpu_section(threads: int, m: dict) -> list[str]:
    """The tables of one thread count."""
    rows, training, checks = m["rows"], m["training"], m["checks"]
    lines = [
        f"## {threads} thread{'s' if threads > 1 else ''}",
        "",
        "### Forward",
        "",
        "| S | SDPA | TRA fused | fused / SDPA | TRA fused, g = 0 | fused, g = 0 / SDPA | TRA chunked "
        "| chunked / SDPA |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s, res in rows:
        sdpa, fused, dense, chunked = res["sdpa"], res["cpu"], res["cpu, g = 0"], res["chunked"]
        lines.append(
            f"| {s} | {sdpa['forward_s']:.3f} s | {fused['forward_s']:.3f} s | {ratio(fused, sdpa, 'forward_s')} | "
            f"{dense['forward_s']:.3f} s | {ratio(dense, sdpa, 'forward_s')} | {chunked['forward_s']:.3f} s | "
            f"{ratio(chunked, sdpa, 'forward_s')} |"
        )
    lines += [
        "",
        "### Forward and backward",
        "",
        "| S | SDPA | TRA fused | fused / SDPA | TRA fused, g = 0 | fused, g = 0 / SDPA | TRA chunked | chunked / SDPA "
        "| TRA naive |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s, res in rows:
        sdpa, fused, dense, chunked = res["sdpa"], res["cpu"], res["cpu, g = 0"], res["chunked"]
        lines.append(
            f"| {s} | {_cell(sdpa)} | {_cell(fused)} | {ratio(fused, sdpa)} | {_cell(dense)} | {ratio(dense, sdpa)} | "
            f"{_cell(chunked)} | {ratio(chunked, sdpa)} | {_cell(res.get('naive'))} |"
        )
    lines += [
        "",
        "Memory check, fwd+bwd at S=8192, B=1, H=4, D=64: "
        + "; ".join(
            f"TRA {name} peaks at {checks[impl]['peak_rss_mb']:,.0f} MB RSS "
            f"({checks[impl]['rss_growth_mb']:,.0f} MB above the process after setup)"
            for impl, name in (("cpu", "fused"), ("chunked", "chunked"))
        )  # fmt: skip
        + ".",
        "",
        "### The training options",
        "",
        "| S | options | SDPA | TRA fused | fused / SDPA | TRA chunked | chunked / SDPA | TRA naive (up to S = 2048) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    b, h = 1, 8
    for s, name, res in training:
        sdpa, fused, chunked, naive = res["sdpa"], res["cpu"], res["chunked"], res.get("naive")
        naive_cell = _cell(naive) if naive or not naive_fits(s, b, h) else "not run"
        lines.append(
            f"| {s} | {name} | {_cell(sdpa)} | {_cell(fused)} | {ratio(fused, sdpa)} | {_cell(chunked)} | "
            f"{ratio(chunked, sdpa)} | {naive_cell} |"
        )
    return lines + [""]


def cpu_report(lengths, repeats, threads_list, build: str, command: str) -> str:
    from cpu_builds import describe
    from tra_attn.utils.provenance import git_commit

    sections = [cpu_section(t, cpu_measurements(lengths, repeats, t, build)) for t in threads_list]
    machine = describe(build, threads_list[0]).replace(f"; {threads_list[0]} thread(s)", "")
    lines = [
        f"# TRA attention on CPU ({build} build): forward and fwd+bwd time, peak memory",
        "",
        f"Command: `{command}`  ",
        f"Machine: {machine}  ",
        f"Date: {datetime.now(timezone.utc):%Y-%m-%d}, commit {git_commit()}",
        "",
        "B=1, H=8, D=64, fp32, causal; best of "
        f"{repeats} after one warm-up, forward (under no_grad: what evaluation and generation pay) and "
        "forward+backward timed alternately (one thread: the process's CPU time; two: wall-clock time); peak RSS of "
        "a fresh process (includes about 300 MB of PyTorch itself). TRA inputs are RMS-normalised q/k with gate "
        "pre-activations ~ N(-2, 1), forgetting heads (median log gate about -2.1), whose weights fall below e^-80 a "
        "few blocks of kept keys left of a query, so the fused kernels' walks end there (docs/cpu_op.md); the "
        "g = 0 columns run the same q, k, v without forgetting: every walk goes to the first key, the kernels' "
        'dense case. Fused: the C++ kernels (`impl="cpu"`); chunked: the PyTorch path; ratios are TRA time / SDPA '
        "time, measured in the same run.",
        "",
    ]
    for section in sections:
        lines += section
    return "\n".join(lines)


def cuda_time(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs, timed with CUDA events after warm-up."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def gpu_methods(q, k, v, g, prune_tau: float) -> dict:
    """The attention calls to time on one set of inputs."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tra_attn import threshold_relative_attention

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    b, s = q.shape[0], q.shape[2]
    documents = (torch.arange(s, device=q.device, dtype=torch.int32) // PACKED_DOCUMENT).expand(b, s)
    return {
        "SDPA flash": sdpa,
        "TRA": lambda: threshold_relative_attention(q, k, v, g, impl="triton"),
        f"TRA, packed {PACKED_DOCUMENT}-token documents": lambda: threshold_relative_attention(
            q, k, v, g, impl="triton", segment_ids=documents
        ),
        f"TRA, early exit (tau={prune_tau:g})": lambda: threshold_relative_attention(
            q, k, v, g, impl="triton", prune_tau=prune_tau
        ),
        **{
            f"TRA, {name}": lambda options=options: threshold_relative_attention(
                q, k, v, g, impl="triton", dropout_seed=0, **options
            )
            for name, options in TRAINING_OPTIONS.items()
        },
    }


def measure(fn, grad_out, repeats: int) -> dict:
    """Forward and backward seconds, and the peak memory of one forward+backward."""
    import torch

    fwd = cuda_time(fn, repeats)
    fwd_bwd = cuda_time(lambda: fn().backward(grad_out), repeats)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn().backward(grad_out)
    return {"fwd_s": fwd, "bwd_s": fwd_bwd - fwd, "peak_mb": (torch.cuda.max_memory_allocated() - base) / 2**20}


def gpu_rows(lengths, dims, repeats, prune_tau: float) -> list[dict]:
    import torch

    rows = []
    for d in dims:
        h = 2048 // d
        for s in lengths:
            b = max(1, 16384 // s)
            q, k, v, g = make_inputs(b, h, s, d, torch.bfloat16, "cuda")
            grad_out = torch.randn_like(q)
            flops = 2 * b * h * s * s * d
            for name, fn in gpu_methods(q, k, v, g, prune_tau).items():
                m = measure(fn, grad_out, repeats)
                rows.append(
                    {
                        "method": name,
                        "S": s,
                        "D": d,
                        "B": b,
                        "H": h,
                        **m,
                        "fwd_tflops": flops / m["fwd_s"] / 1e12,
                        "bwd_tflops": 2.5 * flops / m["bwd_s"] / 1e12,
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def gpu_correctness() -> list[str]:
    """bf16 Triton against the fp32 chunked path on two shapes, plain and with the training options (the same
    dropout mask): max abs error of out and grads, and that error over the reference's largest magnitude."""
    import torch

    from tra_attn import threshold_relative_attention

    lines = []
    for options_name, options in {"exact": {}, **TRAINING_OPTIONS}.items():
        for b, h, s, d in ((2, 4, 1000, 64), (1, 2, 2047, 128)):
            q, k, v, g = make_inputs(b, h, s, d, torch.bfloat16, "cuda")
            grad_out = torch.randn_like(q)
            options = {**options, "dropout_seed": 0}
            out = threshold_relative_attention(q, k, v, g, impl="triton", **options)
            grads = torch.autograd.grad(out, (q, k, v, g), grad_out)
            ref_in = [t.detach().float().requires_grad_() for t in (q, k, v, g)]
            ref = threshold_relative_attention(*ref_in, impl="chunked", **options)
            ref_grads = torch.autograd.grad(ref, ref_in, grad_out.float())
            pairs = zip((out, *grads), (ref, *ref_grads))
            errs = [((a.float() - e).abs().max().item(), e.abs().max().item()) for a, e in pairs]
            cells = [f"{err:.1e} ({err / top:.1%})" for err, top in errs]
            lines.append(f"| B={b} H={h} S={s} D={d}, {options_name} | " + " | ".join(cells) + " |")
    return lines


def gpu_report(lengths, dims, repeats, prune_tau, command="python benchmarks/attention.py --device cuda") -> str:
    import torch

    from tra_attn.utils.provenance import git_commit

    check = gpu_correctness()
    rows = gpu_rows(lengths, dims, repeats, prune_tau)
    sdpa = {(r["S"], r["D"]): r for r in rows if r["method"] == "SDPA flash"}
    lines = [
        "# TRA attention on GPU: Triton kernels against SDPA flash",
        "",
        f"Command: `{command}`  ",
        f"Machine: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
        f"{__import__('triton').__version__}  ",
        f"Date: {datetime.now(timezone.utc):%Y-%m-%d}, commit {git_commit()}",
        "",
        "bf16, causal, 16k tokens per batch (B = 16384 / S), H = 2048 / D; median of "
        f"{repeats} runs after warm-up (CUDA events). TFLOP/s with the FlashAttention convention (forward "
        "2 B H S^2 D, backward 2.5x). TRA inputs: RMS-normalised q/k, gate pre-activations ~ N(-2, 1) "
        "(strongly forgetting heads, median log gate about -2.1). Ratios are TRA throughput over SDPA "
        "flash throughput, measured in the same run. The packed row cuts the same tokens into documents of "
        f"{PACKED_DOCUMENT} (segment ids) and counts the same FLOPs: its ratio over the TRA row is the speed-up "
        "of packing. The training rows run the options of `tra:local_window=4,keep_surrogate=1` (local window 4, keep "
        "surrogate 1), then with logit dropout 0.1 too, through the fused kernels.",
        "",
        "| S | D | method | fwd TFLOP/s | bwd TFLOP/s | fwd ratio | bwd ratio | peak MB (fwd+bwd) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = sdpa[(r["S"], r["D"])]
        lines.append(
            f"| {r['S']} | {r['D']} | {r['method']} | {r['fwd_tflops']:.0f} | {r['bwd_tflops']:.0f} | "
            f"{r['fwd_tflops'] / base['fwd_tflops']:.2f}x | {r['bwd_tflops'] / base['bwd_tflops']:.2f}x | "
            f"{r['peak_mb']:,.0f} |"
        )
    lines += [
        "",
        "Correctness on the same machine (bf16 Triton vs fp32 chunked on the same bf16-rounded inputs): max abs error, "
        "and over the reference's largest magnitude:",
        "",
        "| shape | out | dq | dk | dv | dgate |",
        "|---|---|---|---|---|---|",
        *check,
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--lengths", type=int, nargs="+", help="default: 1k-16k (cpu), 2k-16k (cuda)")
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 128], help="head dims (cuda)")
    parser.add_argument("--prune-tau", type=float, default=10.0, help="early-exit tau (cuda)")
    parser.add_argument("--repeats", type=int, help="default: 3 (cpu), 20 (cuda)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="CPU thread counts (cpu)")
    parser.add_argument(
        "--build",
        choices=("native", "avx2"),
        default="native",
        help="the fused kernels' build and PyTorch's vector paths (cpu; benchmarks/cpu_builds.py)",
    )
    parser.add_argument("--out", type=Path, help="also write the Markdown report here (atomically)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    command = " ".join(["python benchmarks/attention.py", *(sys.argv[1:] if argv is None else argv)])
    if args.device == "cuda":
        lengths = args.lengths or [2048, 4096, 8192, 16384]
        report = gpu_report(lengths, args.dims, args.repeats or 20, args.prune_tau, command)
    else:
        lengths = args.lengths or [1024, 2048, 4096, 8192, 16384]
        report = cpu_report(lengths, args.repeats or 3, args.threads, args.build, command)
    print(report)
    if args.out:
        from tra_attn.utils.atomic import atomic_write_text

        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, report)


if __name__ == "__main__":
    main()
