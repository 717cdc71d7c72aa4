"""Training throughput of a language model: TRA against NoPE (PyTorch SDPA), same size, same run.

    python benchmarks/lm_throughput.py [--lengths 512] [--steps 30] [--repeats 3] [--build native|avx2] \
        [--threads 2] [--out results/benchmarks/lm_throughput_cpu_native.md]
    python benchmarks/lm_throughput.py --device cuda --precision bf16 --lengths 2048 8192 \\
        --model 768 12 12 --tokens-per-step 65536 --steps 20 --repeats 1 --out OUT/lm_throughput_gpu.md

Each measurement is a fresh ``python -m tra_attn.cli train --task lm`` process (byte-level Austen; by
default the CPU language-model preset's model, 4 layers, d_model 128, 4 heads, and its 4,096 tokens per
step), at each context length with ``tokens-per-step / length`` sequences per step. Tokens/s comes from
the run's metrics.jsonl (``elapsed_s`` at the last step: training only, no start-up, no validation), and
on CUDA the peak allocated memory too. Runs of the methods alternate, and so does which goes first, so
that machine noise hits all of them alike; run it on an otherwise idle machine. On a CPU, ``--build`` picks the
fused kernels' build and PyTorch's vector paths for every run (benchmarks/cpu_builds.py: ``avx2`` measures the
AVX2 case on any AVX2 machine) and ``--threads`` their threads; the page names the CPU, the build and the threads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cpu_builds import describe, environment  # noqa: E402
from tra_attn.experiments.methods import method_from_text  # noqa: E402
from tra_attn.utils.atomic import atomic_write_text  # noqa: E402
from tra_attn.utils.provenance import git_commit  # noqa: E402


def config(args, method: str, length: int) -> dict:
    """The training config of ``method``: a kind, or a kind with options (``tra:local_window=4``)."""
    variant = method_from_text(method)
    d_model, n_layers, n_heads = args.model
    model = {"d_model": d_model, "n_layers": n_layers, "n_heads": n_heads, "vocab_size": 256, "dropout": 0.0}
    options = {"max_pos": length} if variant.kind == "cope" else {}  # CoPE's table covers the length
    model = {**model, "block_style": "prenorm", "attention": variant.kind}
    model["attention_options"] = {**options, **variant.options}
    return {
        "task": "lm",
        "task_args": {"corpus": "austen", "tokenizer": "byte"},
        "model": {**model, **variant.model},
        "length": length,
        "batch_size": args.tokens_per_step // length,
        "steps": args.steps,
        "warmup_steps": 5,
        "lr": 1e-3,
        "eval_every": 0,
        "log_every": args.steps,
        "checkpoint_every": args.steps,
        "device": args.device,
        "precision": args.precision,
        "compile": args.compile,
        **variant.train,
    }


def measure(args, attention: str, length: int) -> tuple[float, float | None]:
    """(tokens/s, peak MB) of one fresh training process: on CUDA the peak allocated memory, on CPU the
    process's peak resident set (PyTorch itself included), or None where the OS does not report it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config(args, attention, length)))
        env = {**(environment(args.build, args.threads) if args.device == "cpu" else os.environ),
               "PYTHONPATH": str(ROOT / "src")}  # fmt: skip
        command = [sys.executable, "-m", "tra_attn.cli", "train", "--config", str(path), "--out", f"{tmp}/run"]
        peak_rss = run_process([*command, "--no-progress"], env)
        rows = [json.loads(line) for line in Path(f"{tmp}/run/metrics.jsonl").read_text().splitlines()]
        tokens = args.steps * (args.tokens_per_step // length) * length
        return tokens / rows[-1]["elapsed_s"], rows[-1].get("peak_memory_mb", peak_rss)


def run_process(command: list[str], env: dict) -> float | None:
    """Run ``command`` to completion (an error if it fails); its peak resident set in MB where the OS reports a
    child's own (os.wait4: Linux, macOS), else None."""
    if not hasattr(os, "wait4"):
        subprocess.run(command, env=env, check=True, capture_output=True)
        return None
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            output.seek(0)
            raise subprocess.CalledProcessError(process.returncode, command, output.read().decode(errors="replace"))
    return usage.ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10)  # bytes on macOS, KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["nope", "tra"],
        help="kinds, or kinds with options (tra:local_window=4); the first is the baseline (default: nope tra)",
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[512], help="context lengths (default: 512)")
    parser.add_argument("--tokens-per-step", type=int, default=32 * 128, help="tokens per step (default: 4096)")
    parser.add_argument(
        "--model",
        type=int,
        nargs=3,
        default=[128, 4, 4],
        metavar=("D_MODEL", "N_LAYERS", "N_HEADS"),
        help="model size (default: 128 4 4, the CPU language-model preset)",
    )
    parser.add_argument("--steps", type=int, default=30, help="training steps per run (default: 30)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per method and length (default: 3)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--precision", default="fp32", help="fp32 or bf16 (default: fp32)")
    parser.add_argument("--compile", action="store_true", help="train through torch.compile (default: eager)")
    parser.add_argument(
        "--build",
        choices=("native", "avx2"),
        default="native",
        help="cpu: the fused kernels' build and PyTorch's vector paths (benchmarks/cpu_builds.py)",
    )
    parser.add_argument("--threads", type=int, help="cpu: OpenMP threads of every run (default: torch's)")
    parser.add_argument("--out", type=Path, help="write a Markdown table here (default: print only)")
    args = parser.parse_args()
    for method in args.methods:
        try:
            method_from_text(method)
        except ValueError as err:
            parser.error(f"--methods: {err}")
    for length in args.lengths:
        if length <= 0 or args.tokens_per_step % length:
            raise SystemExit(
                f"--lengths: {length}; expected positive divisors of --tokens-per-step {args.tokens_per_step}"
            )
    results: dict[tuple[str, int], list[tuple[float, float | None]]] = {}
    for length in args.lengths:
        for repeat in range(args.repeats):
            for method in args.methods if repeat % 2 == 0 else args.methods[::-1]:
                results.setdefault((method, length), []).append(measure(args, method, length))
                print(
                    f"L={length} {method} repeat {repeat}: {results[(method, length)][-1][0]:.0f} tokens/s", flush=True
                )
    if args.device.startswith("cuda"):
        machine = f"{torch.cuda.get_device_name()}; torch {torch.__version__}"
        title = f"{args.device}, {args.precision}"
    else:
        machine = describe(args.build, args.threads or torch.get_num_threads())
        title = f"cpu, {args.precision}, {args.build} build"
    lines = [
        f"# Language-model training throughput ({title})",
        "",
        f"Command: `python {' '.join(['benchmarks/lm_throughput.py', *sys.argv[1:]])}`  ",
        f"Machine: {machine}  ",
        f"Code: commit {git_commit()}",
        "",
        f"Model: byte-level, d_model {args.model[0]}, {args.model[1]} layers, {args.model[2]} heads; "
        f"{args.tokens_per_step:,} tokens per step; {args.steps} training steps per run (fwd + bwd + AdamW"
        f"{', torch.compile' if args.compile else ''}), {args.repeats} run(s) per method and length, interleaved. "
        "Tokens/s: median over runs. Peak memory: the largest over runs; "
        + (
            "allocated CUDA memory."
            if args.device.startswith("cuda")
            else "the training process's peak resident set (PyTorch itself, about 300 MB, included)."
        ),
        "",
        f"| length | method | tokens/s (median) | runs | vs {args.methods[0]} | peak memory (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for length in args.lengths:
        baseline = statistics.median(s for s, _ in results[(args.methods[0], length)])
        for method in args.methods:
            speeds = [s for s, _ in results[(method, length)]]
            memory = [m for _, m in results[(method, length)] if m is not None]
            median = statistics.median(speeds)
            cells = [str(length), method, f"{median:.0f}", ", ".join(f"{s:.0f}" for s in speeds)]
            cells += [f"{median / baseline:.2f}x", f"{max(memory):.0f}" if memory else "n/a"]
            lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
