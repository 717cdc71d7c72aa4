"""A run's ``metrics.jsonl``, written by rank 0: training-loss rows, validation rows and the fit step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ..utils.jsonl import append_jsonl, read_jsonl, write_jsonl
from ..utils.os_errors import writing
from .distributed import Processes

METRICS_NAME = "metrics.jsonl"


class MetricsLog:
    """The rows of one run; every rank calls each method at the same steps, rank 0 writes."""

    def __init__(self, path: Path, processes: Processes, device: str, seconds: Callable[[], float]):
        self.path, self.processes, self.device, self.seconds = path, processes, device, seconds

    def restart_after(self, step: int) -> None:
        """Drop the rows after ``step`` (the checkpoint resumed from): they will be written again."""
        if self.processes.is_main:
            kept = [row for row in read_jsonl(self.path) if row["step"] <= step] if step else []
            with writing("metrics log", self.path):
                write_jsonl(self.path, kept)

    def training(self, step: int, loss: torch.Tensor, lr: float, grad_norm: torch.Tensor) -> dict | None:
        """Write the training row of ``step``: the loss summed over the ranks' shares (a collective), the
        learning rate, the gradient norm, the peak memory on CUDA. Returns the row on rank 0, else None."""
        loss = self.processes.sum(loss)
        if not self.processes.is_main:
            return None
        norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm  # FSDP
        row = {"step": step, "loss": loss.item(), "lr": lr, "grad_norm": norm.item()}
        if torch.device(self.device).type == "cuda":  # allocator statistics: no device sync
            row["peak_memory_mb"] = torch.cuda.max_memory_allocated(self.device) / 2**20
        row["elapsed_s"] = self.seconds()
        self._append(row)
        return row

    def validation(self, step: int, val: dict | None) -> None:
        """Write the validation metrics of ``step`` as ``val_*`` fields."""
        if self.processes.is_main:
            self._append({"step": step, **{f"val_{k}": v for k, v in val.items()}})

    def fit(self, step: int) -> None:
        """Write the step at which the run fitted."""
        if self.processes.is_main:
            self._append({"step": step, "fit_step": step})

    def _append(self, row: dict) -> None:
        with writing("metrics log", self.path):
            append_jsonl(self.path, row)
