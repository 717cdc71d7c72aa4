"""Divergence: a run whose loss, gradient norm or weights stop being finite stops with ``TrainingDiverged``,
and no checkpoint of it is ever written.

Reading a GPU value on the host waits for the GPU, so the loop does not test each step's loss and gradient
norm on the host: ``DivergenceWatch.note`` keeps the first non-finite step on the device (a few elementwise
kernels, no synchronisation), and ``check`` reads it where the loop synchronises anyway or is about to
write: log rows (which read the loss), validations, checkpoints and the stop on a signal. A diverged run
therefore trains at most ``log_every - 1`` steps past the step it names; those steps are wasted, never
saved. Checkpoints also check the weights themselves (an update can overflow them while the loss and
gradient norm were still finite).
"""

from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import latest_checkpoint
from .distributed import Processes

NEVER = 2**62  # the first non-finite step of a run that has none


class TrainingDiverged(ValueError):
    """Training stopped at ``step``: ``what`` (its loss or gradient norm, or the weights) was not finite.
    ``checkpoint``: the last checkpoint written, all finite (None if none was). A ValueError, so the CLI
    prints it as one line; comparisons catch it to record the run as diverged."""

    def __init__(self, step: int, checkpoint: Path | None, what: str = "the loss or gradient norm"):
        last = f"the last finite checkpoint is {checkpoint}" if checkpoint else "no checkpoint was written"
        super().__init__(
            f"training diverged at step {step}: {what} is not finite (NaN or inf); {last}. Expected finite "
            "values: try a lower --lr or more --warmup-steps"
        )
        self.step, self.checkpoint = step, checkpoint


class DivergenceWatch:
    """The first step whose loss or gradient norm was not finite, kept on ``device``."""

    def __init__(self, device: str):
        self.first = torch.tensor(NEVER, device=device)

    def note(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Record ``step`` if its loss or gradient norm is not finite; no host synchronisation."""
        norm = grad_norm.to_local() if hasattr(grad_norm, "to_local") else grad_norm  # FSDP: this rank's part
        finite = torch.isfinite(loss) & torch.isfinite(norm)
        self.first = torch.minimum(self.first, torch.where(finite, NEVER, step))

    def check(self, processes: Processes, run_dir: Path) -> None:
        """Raise TrainingDiverged on every rank at the first step any rank recorded (every rank calls this at
        the same steps; it reads the device)."""
        first = int(processes.min(self.first))
        if first != NEVER:
            raise TrainingDiverged(first, latest_checkpoint(run_dir))
