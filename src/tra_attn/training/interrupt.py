"""Ctrl-C at step boundaries: a SIGINT during a step is held until the step is whole.

A checkpoint must only hold a state between two steps: weights, optimizer state and RNG state all
after step N and before step N + 1. Inside ``deferred_interrupts()`` the first SIGINT only sets a flag;
the training loop finishes the step, saves, and raises KeyboardInterrupt itself. A second SIGINT
interrupts at once (the last checkpoint on disk is still whole).
"""

from __future__ import annotations

import contextlib
import signal
import threading


class InterruptFlag:
    def __init__(self):
        self.requested = False

    def handler(self, signum, frame):
        if self.requested:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.requested = True
        print("\ninterrupt: finishing the current step, then saving a checkpoint (Ctrl-C again to stop now)")


@contextlib.contextmanager
def deferred_interrupts():
    """Yield an ``InterruptFlag`` set by SIGINT; outside the main thread, signals cannot be caught and
    the flag stays unset (KeyboardInterrupt then arrives as usual)."""
    flag = InterruptFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.signal(signal.SIGINT, flag.handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)
