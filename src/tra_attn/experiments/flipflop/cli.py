"""``tra flipflop``: the main job, TRA vs its ablations vs the baselines on flip-flop."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ...utils.cli_help import HelpFormatter
from .presets import PRESETS


def cmd_flipflop(args) -> None:
    from .run import run_flipflop

    out = run_flipflop(
        args.preset,
        methods=args.methods,
        seeds=args.seeds,
        steps=args.steps,
        lrs=args.lrs,
        out=args.out,
        device=args.device,
        progress=not args.no_progress,
        command="tra " + shlex.join(args.argv),
    )
    print((out / "results.md").read_text())


def add_commands(sub: argparse._SubParsersAction) -> None:
    fl = sub.add_parser(
        "flipflop",
        help="the main job: TRA vs ablations vs baselines on flip-flop",
        description="Train every method on flip-flop, evaluate every split, write results.jsonl, results.md "
        "and accuracy.png. Resumable: finished runs are skipped, unfinished ones continue.",
        formatter_class=HelpFormatter,
    )
    presets = ", ".join(f"{name} ({p.description})" for name, p in PRESETS.items())
    fl.add_argument("--preset", default="cpu", help=f"model and recipe: {presets}")
    fl.add_argument("--methods", nargs="+", help="attention kinds to run (default: every registered kind)")
    fl.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the preset's)")
    fl.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    fl.add_argument(
        "--lrs",
        type=float,
        nargs="+",
        help="learning rates to sweep; each method keeps the best on validation data "
        "(default: the preset's validated rate per method)",
    )
    fl.add_argument("--out", type=Path, help="output directory (default: runs/flipflop_<preset>)")
    fl.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    fl.add_argument("--no-progress", action="store_true", help="no progress bars")
    fl.set_defaults(func=cmd_flipflop)
