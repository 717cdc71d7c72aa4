"""Ctrl-C and SIGTERM at step boundaries: a SIGINT or SIGTERM during a step is held until the step is whole.

A checkpoint must only hold a state between two steps: weights, optimizer state and RNG state all
after step N and before step N + 1. Inside ``deferred_interrupts()`` the first SIGINT (Ctrl-C) or SIGTERM
(a scheduler's preemption: SLURM, Kubernetes, spot instances, torchrun forwarding its own) only records
the signal; the training loop finishes the step, saves, and raises ``Interrupted``. A second SIGINT
interrupts at once (the last checkpoint on disk is still whole); a second SIGTERM changes nothing, since
schedulers may deliver it twice (to the job step and again through torchrun) and follow it with SIGKILL
anyway.
"""

from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """Training stopped on ``signum`` (SIGINT or SIGTERM) after ``step``, saved; ``exit_code`` is the shell's
    convention for a process ended by that signal: 128 + signum (130 for Ctrl-C, 143 for SIGTERM)."""

    def __init__(self, signum: int, step: int):
        name = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
        self.stopped = f"{name} after step {step}: saved a checkpoint"
        super().__init__(f"{self.stopped}; continue with --resume")
        self.signum, self.step = signum, step

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class InterruptFlag:
    """The first signal received (``signum``; 0 while none); ``announce``: say so (rank 0 of several does)."""

    def __init__(self, announce: bool = True):
        self.signum, self.announce = 0, announce

    def handler(self, signum, frame):
        if self.signum and signum == signal.SIGINT:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        if self.signum:
            return
        self.signum = signum
        if self.announce:
            name, stop = ("interrupt", " (Ctrl-C again to stop now)") if signum == signal.SIGINT else ("SIGTERM", "")
            print(f"\n{name}: finishing the current step, then saving a checkpoint{stop}", flush=True)


@contextlib.contextmanager
def deferred_interrupts(announce: bool = True):
    """Yield an ``InterruptFlag`` set by SIGINT or SIGTERM, and restore the previous handlers after; outside
    the main thread, signals cannot be caught and the flag stays unset (KeyboardInterrupt then arrives as
    usual, SIGTERM ends the process)."""
    flag = InterruptFlag(announce)
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = {signum: signal.signal(signum, flag.handler) for signum in SIGNALS}
    try:
        yield flag
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
