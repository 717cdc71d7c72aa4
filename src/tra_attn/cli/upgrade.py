"""``tra upgrade PATH``: files of earlier versions converted in place (``tra_attn/upgrade``)."""

from __future__ import annotations

import argparse

from ..utils.cli_help import HelpFormatter
from .args import path_arg


def cmd_upgrade(args) -> None:
    from ..upgrade.files import upgrade

    for path in args.paths:
        written = upgrade(path, notice=print)
        if not written:
            print(f"{path}: every file is of the current version")
        for file in written:
            print(f"converted {file}")


def add_upgrade_command(sub: argparse._SubParsersAction) -> None:
    up = sub.add_parser(
        "upgrade",
        help="convert runs, checkpoints, models and results of an earlier version of tra to the current one",
        description="Convert, in place, every file of an earlier version under each PATH: run and checkpoint "
        "configs (train_config.json, config.json), save_pretrained and Hugging Face folders, a run store, run "
        "records, and a 0.2 results folder (its rows become run records in PATH/runs/). Each file is replaced "
        "atomically and only if it changes, after every file was read and every conversion checked (a file of tra that "
        "cannot be converted stops it before anything is written; files of other programs are left alone); running "
        "it again converts what an interruption left.",
        formatter_class=HelpFormatter,
    )
    up.add_argument("paths", nargs="+", type=path_arg, metavar="PATH", help="a file, or a folder searched recursively")
    up.set_defaults(func=cmd_upgrade)
