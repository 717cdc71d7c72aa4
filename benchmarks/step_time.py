"""Training step time of the CPU flip-flop preset: this checkout against another one, interleaved.

    python benchmarks/step_time.py --other /path/to/other/checkout/src [--steps 60] [--repeats 3]

Each run is a fresh ``python -m tra_attn.cli train`` process on the preset's model and recipe (no
validation, one checkpoint at the end); the time per step is read from the run's metrics.jsonl
(``elapsed_s`` at the last step, which excludes start-up). Runs of the two checkouts alternate, and
so does which goes first, so that machine noise hits both alike; run it on an otherwise idle
machine. Checkouts from before 0.2 (no ``training/`` package) take the flip-flop parameters as
top-level config fields; newer ones as ``task_args``.
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

HERE = Path(__file__).resolve().parents[1] / "src"
MODEL = {"d_model": 128, "n_layers": 2, "n_heads": 4, "block_style": "prenorm", "vocab_size": 6, "cope_max_pos": 128}


def config(src: Path, attention: str, steps: int) -> dict:
    train = {"length": 128, "batch_size": 64, "steps": steps, "warmup_steps": 50, "lr": 1e-3, "eval_every": 0}
    train.update(log_every=steps, checkpoint_every=steps, task="flipflop")
    task = {"p_ignore": 0.8, "final_read": True}
    versioned = (src / "tra_attn" / "training").is_dir()
    return {**train, **({"task_args": task} if versioned else task), "model": {**MODEL, "attention": attention}}


def seconds_per_step(src: Path, attention: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config(src, attention, steps)))
        env = {**os.environ, "PYTHONPATH": str(src)}
        command = [sys.executable, "-m", "tra_attn.cli", "train", "--config", str(path), "--out", f"{tmp}/run"]
        subprocess.run([*command, "--no-progress"], env=env, check=True, capture_output=True)
        rows = [json.loads(line) for line in Path(f"{tmp}/run/metrics.jsonl").read_text().splitlines()]
        return rows[-1]["elapsed_s"] / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other", type=Path, required=True, help="src/ folder of the checkout to compare against")
    parser.add_argument("--methods", nargs="+", default=["tra", "cope"], help="attention kinds (default: tra cope)")
    parser.add_argument("--steps", type=int, default=60, help="steps per run (default: 60)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per checkout and method (default: 3)")
    args = parser.parse_args()
    for method in args.methods:
        times = {"this": [], "other": []}
        trees = {"this": HERE, "other": args.other.resolve()}
        for repeat in range(args.repeats):
            for name in ("this", "other") if repeat % 2 else ("other", "this"):  # alternate who goes first
                times[name].append(seconds_per_step(trees[name], method, args.steps))
        this, other = statistics.median(times["this"]), statistics.median(times["other"])
        print(
            f"{method}: this {1000 * this:.1f} ms/step, other {1000 * other:.1f} ms/step "
            f"(medians of {args.repeats}), ratio this/other {this / other:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
