"""Runs of one question on one worker with every thread, against several workers splitting the threads.

    python benchmarks/parallel_runs.py [--task majority] [--preset cpu] [--methods tra fox] [--seeds 0 1] \\
        [--steps 1000] [--lr 3e-3] [--jobs 1 2] [--repeats 2] [--out results/benchmarks/parallel_runs_cpu.md]

Each setting trains the same question from nothing (a fresh store and evidence): every method and seed at one
rate for exactly ``--steps`` steps (no early stop, so every setting does the same work), then writes its page.
``tra run --jobs 1`` trains the runs one after another on all of torch's threads; ``--jobs N`` trains N at once
in processes of threads/N each. Wall-clock seconds of the whole command, start-up included; the settings
alternate between repeats, so machine noise hits them alike.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cpu_builds import describe  # noqa: E402
from tra_attn.experiments.methods import method_from_text  # noqa: E402
from tra_attn.utils.atomic import atomic_write_text  # noqa: E402
from tra_attn.utils.provenance import git_commit  # noqa: E402

SPEC = """
from tra_attn.experiments.methods import method_from_text
from tra_attn.experiments.spec import Question

spec = Question(
    title="The parallel-runs benchmark",
    task={task!r},
    preset={preset!r},
    methods=tuple(method_from_text(m) for m in {methods!r}),
    seeds={seeds!r},
    lrs=({lr!r},),
    lrs_source="one rate for every method: a timing, not a comparison",
    steps={steps!r},
    fit_accuracy=0,
)
"""


def timed_run(args, jobs: int, folder: Path) -> float:
    """Seconds of one ``tra run`` of the question from nothing, with ``jobs`` workers."""
    question = folder / "results" / "question"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "results" / "runs").mkdir(parents=True)
    question.mkdir()
    spec = SPEC.format(task=args.task, preset=args.preset, methods=args.methods, seeds=tuple(args.seeds), lr=args.lr,
                       steps=args.steps)  # fmt: skip
    (question / "spec.py").write_text(spec)
    command = [sys.executable, "-m", "tra_attn", "run", str(question), "--store", str(folder / "store"),
               "--jobs", str(jobs), "--no-plots", "--no-progress"]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, cwd=folder)
    return time.perf_counter() - start


def page(args, seconds: dict[int, list[float]]) -> str:
    runs = len(args.methods) * len(args.seeds)
    base = statistics.median(seconds[args.jobs[0]])
    lines = [
        "# Runs of one question: one worker with every thread, or several splitting them",
        "",
        f"Command: `python benchmarks/parallel_runs.py --task {args.task} --preset {args.preset} --methods "
        f"{' '.join(args.methods)} --seeds {' '.join(map(str, args.seeds))} --steps {args.steps} --jobs "
        f"{' '.join(map(str, args.jobs))} --repeats {args.repeats}`  ",
        f"Code: commit {git_commit()}  ",
        f"Machine: {describe(None, torch.get_num_threads())}",
        "",
        f"{runs} runs ({', '.join(args.methods)}; seeds {', '.join(map(str, args.seeds))}) of {args.task} under its "
        f"`{args.preset}` preset, {args.steps} steps each, trained from nothing by `tra run --jobs N`: N processes of "
        f"{torch.get_num_threads()}/N threads each. Seconds of the whole command (start-up and pages included), median "
        f"of {args.repeats}.",
        "",
        "| --jobs | threads per run | seconds | runs per minute | speed-up |",
        "|---|---|---|---|---|",
    ]
    for jobs in args.jobs:
        median = statistics.median(seconds[jobs])
        threads = max(1, torch.get_num_threads() // jobs)
        lines.append(f"| {jobs} | {threads} | {median:.1f} | {60 * runs / median:.2f} | {base / median:.2f}x |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="majority")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--methods", nargs="+", default=["tra", "fox"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--jobs", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    for method in args.methods:
        method_from_text(method)
    seconds: dict[int, list[float]] = {jobs: [] for jobs in args.jobs}
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            for jobs in args.jobs if repeat % 2 == 0 else args.jobs[::-1]:
                seconds[jobs].append(timed_run(args, jobs, Path(scratch) / "work"))
                print(f"--jobs {jobs}: {seconds[jobs][-1]:.1f} s", flush=True)
    text = page(args, seconds)
    print(text)
    if args.out:
        atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
