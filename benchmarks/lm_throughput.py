"""Training throughput of a language model: TRA against NoPE (PyTorch SDPA), same size, same run.

    python benchmarks/lm_throughput.py [--length 512] [--steps 30] [--repeats 3] [--out results/lm_throughput_cpu.md]

Each measurement is a fresh ``python -m tra_attn.cli train --task lm`` process on the CPU language-model
preset's model (byte-level Austen; 4 layers, d_model 128, 4 heads) at context ``--length`` with the
preset's 4,096 tokens per step. Tokens/s comes from the run's metrics.jsonl (``elapsed_s`` at the last
step: training only, no start-up, no validation). Runs of the methods alternate, and so does which goes
first, so that machine noise hits all of them alike; run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tra_attn.utils.atomic import atomic_write_text  # noqa: E402
from tra_attn.utils.provenance import git_commit  # noqa: E402

MODEL = {"d_model": 128, "n_layers": 4, "n_heads": 4, "block_style": "prenorm", "dropout": 0.0, "vocab_size": 256}
TOKENS_PER_STEP = 32 * 128  # the CPU preset's batch


def config(attention: str, length: int, steps: int) -> dict:
    if TOKENS_PER_STEP % length:
        raise SystemExit(f"--length = {length}; expected a divisor of {TOKENS_PER_STEP}")
    return {
        "task": "lm",
        "task_args": {"corpus": "austen", "tokenizer": "byte"},
        "model": {**MODEL, "attention": attention, "cope_max_pos": length},
        "length": length,
        "batch_size": TOKENS_PER_STEP // length,
        "steps": steps,
        "warmup_steps": 5,
        "lr": 1e-3,
        "eval_every": 0,
        "log_every": steps,
        "checkpoint_every": steps,
    }


def tokens_per_second(attention: str, length: int, steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config(attention, length, steps)))
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        command = [sys.executable, "-m", "tra_attn.cli", "train", "--config", str(path), "--out", f"{tmp}/run"]
        subprocess.run([*command, "--no-progress"], env=env, check=True, capture_output=True)
        rows = [json.loads(line) for line in Path(f"{tmp}/run/metrics.jsonl").read_text().splitlines()]
        return steps * TOKENS_PER_STEP / rows[-1]["elapsed_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--methods", nargs="+", default=["nope", "tra"], help="kinds; the first is the baseline (default: nope tra)"
    )
    parser.add_argument("--length", type=int, default=512, help="context length (default: 512)")
    parser.add_argument("--steps", type=int, default=30, help="training steps per run (default: 30)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per method (default: 3)")
    parser.add_argument("--out", type=Path, help="write a Markdown table here (default: print only)")
    args = parser.parse_args()
    speeds: dict[str, list[float]] = {m: [] for m in args.methods}
    for repeat in range(args.repeats):
        order = args.methods if repeat % 2 == 0 else args.methods[::-1]
        for method in order:
            speeds[method].append(tokens_per_second(method, args.length, args.steps))
            print(f"{method} repeat {repeat}: {speeds[method][-1]:.0f} tokens/s", flush=True)
    baseline = statistics.median(speeds[args.methods[0]])
    command = "python benchmarks/lm_throughput.py " + " ".join(
        [
            f"--methods {' '.join(args.methods)}",
            f"--length {args.length}",
            f"--steps {args.steps}",
            f"--repeats {args.repeats}",
        ]
        + ([f"--out {args.out}"] if args.out else [])
    )
    lines = [
        f"# Language-model training throughput at L={args.length} (CPU)",
        "",
        f"Command: `{command}`  ",
        f"Code: commit {git_commit()}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}",
        "",
        f"Model: byte-level, 4 layers, d_model 128, 4 heads, {TOKENS_PER_STEP // args.length} x {args.length} tokens "
        f"per step; {args.steps} training steps per run (fwd + bwd + AdamW), {args.repeats} runs per method, "
        "interleaved. Tokens/s: median over runs.",
        "",
        f"| method | tokens/s (median) | runs | vs {args.methods[0]} |",
        "|---|---|---|---|",
    ]
    for method in args.methods:
        median = statistics.median(speeds[method])
        runs = ", ".join(f"{s:.0f}" for s in speeds[method])
        lines.append(f"| {method} | {median:.0f} | {runs} | {median / baseline:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
