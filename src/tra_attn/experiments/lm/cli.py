"""``tra lm ...``: commands for language models on real text."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...utils.cli_help import HelpFormatter


def cmd_sample(args) -> None:
    from .sample import sample_text

    top_k = args.top_k or None
    text = sample_text(
        args.checkpoint, args.prompt, args.max_new_tokens, args.temperature, top_k, args.seed, args.device
    )
    print(args.prompt + text)


def add_commands(sub: argparse._SubParsersAction) -> None:
    lm = sub.add_parser("lm", help="language models on real text", formatter_class=HelpFormatter)
    lm_sub = lm.add_subparsers(dest="lm_command", required=True, metavar="COMMAND")
    sp = lm_sub.add_parser(
        "sample", help="continue a prompt with a trained model (KV-cache decoding)", formatter_class=HelpFormatter
    )
    sp.add_argument("--checkpoint", type=Path, required=True, help="a checkpoint, run or save_pretrained directory")
    sp.add_argument("--prompt", required=True, help="text to continue (required)")
    sp.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate")
    sp.add_argument("--temperature", type=float, default=0.8, help="0 decodes greedily")
    sp.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens; 0 keeps them all")
    sp.add_argument("--seed", type=int, default=0, help="the same seed gives the same text")
    sp.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    sp.set_defaults(func=cmd_sample)
