"""``tra flipflop``: the main job, TRA vs its ablations vs the baselines on flip-flop."""

from __future__ import annotations

import argparse

from ...utils.cli_help import HelpFormatter
from ..runs import add_comparison_flags, add_synthetic_flags, synthetic_arguments
from .presets import PRESETS


def cmd_flipflop(args) -> None:
    from .run import run_flipflop

    out = run_flipflop(args.preset, **synthetic_arguments(args))
    print((out / "results.md").read_text())


def add_commands(sub: argparse._SubParsersAction) -> None:
    fl = sub.add_parser(
        "flipflop",
        help="the main job: TRA vs ablations vs baselines on flip-flop",
        description="Train every method on flip-flop, evaluate every split, write results.jsonl, results.md "
        "and accuracy.png. Resumable: finished runs are skipped, unfinished ones continue.",
        formatter_class=HelpFormatter,
    )
    add_comparison_flags(
        fl,
        PRESETS,
        methods="every registered kind",
        lrs="the preset's validated rate per method",
        out="runs/flipflop_<preset>",
    )
    add_synthetic_flags(fl)
    fl.set_defaults(func=cmd_flipflop)
