"""``tra retrofit``: the retrofit experiment (``experiments/retrofit``): a RoPE Llama, its RoPE scalings, its
conversions to TRA, FoX and ALiBi continued for 10% and 25% of the budget, and TRA from scratch, at 1x-16x."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
from pathlib import Path

from ..utils.cli_help import HelpFormatter
from .args import path_arg
from .train import parse_seed


def cmd_retrofit(args) -> None:
    if importlib.util.find_spec("transformers") is None:
        raise ValueError(
            "tra retrofit needs the Python package 'transformers'; expected `pip install -e .[hf]` (or `pip install "
            "'transformers>=5.24,<6'`)"
        )
    from ..experiments.retrofit.run import run_retrofit

    def say(line: str) -> None:
        if not args.no_progress:
            print(line, file=sys.stderr, flush=True)

    out = args.out or Path(f"runs/retrofit_{args.preset}")
    page, _ = run_retrofit(args.preset, out, args.cache, args.seed, "tra " + shlex.join(args.argv), say)
    print(f"wrote {page}")


def add_retrofit_command(sub: argparse._SubParsersAction) -> None:
    from ..experiments.retrofit.presets import PRESETS

    presets = ", ".join(f"{name} ({p.description})" for name, p in PRESETS.items())
    rp = sub.add_parser(
        "retrofit",
        help="retrofitting: a RoPE Llama, its RoPE scalings, and its conversions to TRA, FoX and ALiBi continued "
        "for 10%% and 25%% of the budget, beside TRA from scratch, at 1x-16x the training length",
        description="Train a RoPE model of transformers' Llama on the preset's text budget, evaluate it at 1x-16x its "
        "training length as it is and with linear, dynamic NTK and YaRN scaling, convert it to TRA (RoPE kept and "
        "removed, and its recommended configuration with RoPE kept), FoX and ALiBi (tra_attn.hf.add_attention), "
        "train each 10% and 25% of the budget more at each peak rate of the preset and keep the rate best on "
        "validation text before the scored text, train TRA from scratch, and write OUT/README.md with its plot "
        "(experiments/retrofit). Every stage is a checkpoint in the cache: a rerun skips what is done.",
        formatter_class=HelpFormatter,
    )
    rp.add_argument("--preset", default="cpu", choices=list(PRESETS), help=presets.replace("%", "%%"))
    rp.add_argument("--out", type=path_arg, help="the page's folder (default: runs/retrofit_<preset>)")
    rp.add_argument(
        "--cache",
        type=path_arg,
        help="the stages' checkpoints and evaluations (default: $XDG_CACHE_HOME/tra/retrofit, ~/.cache/tra/retrofit)",
    )
    rp.add_argument("--seed", type=parse_seed, default=0, help="the seed of every initialisation and batch")
    rp.add_argument("--no-progress", action="store_true", help="no progress lines")
    rp.set_defaults(func=cmd_retrofit)
