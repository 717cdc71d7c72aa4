"""The ``tra`` command: a thin dispatcher over data, training, evaluation, questions and conversions.

Generic commands (``data``, ``train``, ``eval``) work for every registered task; ``run`` answers a question
(a results folder's spec: its runs and its page), ``flipflop`` is the main job and ``retrofit`` the retrofitting
experiment on transformers' Llama; ``kernels`` says what TRA runs on on this CPU.

Exit codes: 0 done; 1 an operating-system error (a read-only folder, a full disk, a name too long: one
``tra: error:`` line naming what was written, the path and the reason), or a torchrun worker that lost the
other processes; 2 a usage or input error (one ``tra: error:`` line; a diverged training run is one); 130
stopped by Ctrl-C and 143 by SIGTERM (128 + the signal, as shells and schedulers expect), after the training
step in progress was finished and checkpointed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from safetensors import SafetensorError

from ..training.distributed import lost_peer
from ..training.divergence import TrainingDiverged
from ..training.interrupt import Interrupted
from ..utils.cli_help import HelpFormatter
from ..utils.memory import out_of_memory
from ..utils.os_errors import describe, os_error
from .args import Parser
from .checkpoints import add_convert_command, add_eval_command, add_inspect_command
from .kernels import add_kernels_command
from .lm import add_lm_command
from .retrofit import add_retrofit_command
from .run import add_flipflop_command, add_run_command
from .train import add_data_command, add_train_command
from .upgrade import add_upgrade_command


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tra", description=__doc__, formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    add_data_command(sub)
    add_train_command(sub)
    add_eval_command(sub)
    add_inspect_command(sub)
    add_run_command(sub)
    add_flipflop_command(sub)
    add_lm_command(sub)
    add_retrofit_command(sub)
    add_convert_command(sub)
    add_upgrade_command(sub)
    add_kernels_command(sub)
    return parser


def _ignore_signals(*signums: int) -> None:
    """Ignore ``signums`` from now on (from the main thread, the only one that may set handlers)."""
    if threading.current_thread() is threading.main_thread():
        for signum in signums:
            signal.signal(signum, signal.SIG_IGN)


def _say(line: str) -> None:
    """``line`` to stderr in one write: the lines of torchrun workers sharing a terminal do not interleave."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _machine_failure(err: Exception, command: str) -> str | None:
    """One line for an error of the machine, not of the input: an OS error (also one behind torch's and
    safetensors' own exceptions), or a collective that lost another torchrun worker. None for anything
    else, a bug, whose traceback is wanted."""
    if (memory := out_of_memory(err)) is not None:
        return f"tra {command}: {memory}"
    cause = os_error(err) if isinstance(err, (OSError, RuntimeError, SafetensorError)) else None
    if cause is not None:
        return describe(cause) if cause.filename else f"tra {command}: {describe(cause)}"
    return lost_peer(err)


def main(argv=None) -> int:
    """Run ``tra ARGV``; the exit code. Without ``argv`` (the process's own command line: ``tra``, ``python -m
    tra_attn``) the process ends with the command, so once a signal stops it, later ones are ignored: two Ctrl-C
    within milliseconds, or a scheduler's repeated SIGTERM, end in 130 or 143, never in Python dying of the
    signal with a traceback. Called with ``argv`` (tests, scripts) the process's signal handlers stay as they are."""
    process = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        code = _run(args, process)
    except KeyboardInterrupt:  # a second Ctrl-C while the first one's exit was being reported
        code = 130
    if process and code in (130, 143):  # the checkpoint is written: later signals only cut the exit short
        _ignore_signals(signal.SIGINT, signal.SIGTERM)
    return code


def _run(args, process: bool) -> int:
    """Run the command; its exit code, with one line for each error a user can act on. ``process``: the command is
    the process's (``main``), which may stop listening to Ctrl-C once stopping on one."""
    # Under torchrun every rank stops on the same signal or divergence at the same step: rank 0 says so.
    speaks = os.environ.get("RANK", "0") == "0"
    try:
        args.func(args)
    except ValueError as err:
        if speaks or not isinstance(err, TrainingDiverged):
            _say(f"tra: error: {err}")
        return 2
    except Interrupted as err:
        if process:
            _ignore_signals(signal.SIGINT)
        if speaks:  # tra run and tra flipflop resume by being run again: they have no --resume
            hint = "continue with --resume" if hasattr(args, "resume") else "run the same command again to continue"
            _say(f"tra: {err.stopped}; {hint}")
        return err.exit_code
    except KeyboardInterrupt:
        if process:
            _ignore_signals(signal.SIGINT)
        _say("tra: interrupted")
        return 130
    except Exception as err:
        line = _machine_failure(err, args.command)
        if line is None:
            raise
        _say(f"tra: error: {line}")
        return 1
    return 0
