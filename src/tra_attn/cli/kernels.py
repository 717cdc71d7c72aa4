"""``tra kernels``: the fused CPU kernels on this machine (their build, their speed against the chunked path) and
what ``impl="auto"`` runs TRA on (``ops/tra/cpu_choice.py``)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from ..utils.cli_help import HelpFormatter
from .args import positive_int


def cmd_kernels(args) -> None:
    import torch

    from ..ops.tra import cpu_build, cpu_choice

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.measure:
        found = cpu_build.kernels()
        if found is not None:
            cpu_choice.forget_timing(found)
    status = cpu_choice.status()
    print(json.dumps(asdict(status), indent=1) if args.json else status.describe())


def add_kernels_command(sub: argparse._SubParsersAction) -> None:
    kp = sub.add_parser(
        "kernels",
        help="the fused CPU kernels here: their build, their speed, and what impl='auto' runs TRA on",
        description="Build the fused CPU kernels if needed (TRA_CPU_MARCH, TRA_CPU_CFLAGS and CXX choose the "
        "build), measure them against the chunked PyTorch path once per build, CPU and thread count, and say "
        "which of the two impl='auto' runs TRA on. TRA_CPU_KERNELS=1 runs the kernels without measuring, 0 never "
        "builds them.",
        formatter_class=HelpFormatter,
    )
    kp.add_argument("--threads", type=positive_int, help="measure at this many threads (default: torch's)")
    kp.add_argument("--measure", action="store_true", help="measure again, replacing the stored measurement")
    kp.add_argument("--json", action="store_true", help="print the status as JSON")
    kp.set_defaults(func=cmd_kernels)
