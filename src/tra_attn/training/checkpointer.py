"""Checkpoints of a run in training: the state after a whole step, written by rank 0; with FSDP every
rank takes part (gathering the full weights, writing its optimizer shard). Weights that are not finite are
never written: the run stops with ``TrainingDiverged`` instead."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..models import TransformerLM
from ..models.io import nonfinite_tensors
from ..utils.os_errors import writing
from .checkpoint import latest_checkpoint, new_checkpoint_folder, save_checkpoint
from .distributed import Processes
from .divergence import TrainingDiverged
from .sharding import SHARDED, full_weights, save_optimizer


@dataclass
class Checkpointer:
    """Saves model, optimizer and RNG state after a step (every rank calls ``save``), and remembers the step."""

    run_dir: Path
    saved_config: dict  # the run's config as recorded (its device as given)
    model: TransformerLM
    optimizer: torch.optim.Optimizer
    processes: Processes
    fsdp: bool
    device: str
    seconds: Callable[[], float]  # training time so far
    last_step: int  # the step of the checkpoint last saved (or resumed from)

    def save(self, step: int, fit_step: int | None) -> None:
        """Checkpoint ``step``; ``fit_step`` (the step at which the run fitted, if it did) goes into its state.
        Raises TrainingDiverged on every rank, writing nothing, if a weight is not finite."""
        weights = full_weights(self.model) if self.fsdp else self.model.state_dict()  # FSDP: on rank 0 only
        if self.processes.any(bool(nonfinite_tensors(weights)), self.device):
            raise TrainingDiverged(step, latest_checkpoint(self.run_dir), "a weight")
        state = {"rng": torch.get_rng_state(), "step": step, "train_seconds": self.seconds()}
        state["cpu_threads"] = torch.get_num_threads()  # the last bits of a CPU run depend on it (resume.py)
        if fit_step is not None:
            state["fit_step"] = fit_step
        if torch.device(self.device).type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        if self.fsdp:
            self._save_sharded(step, state, weights)
        elif self.processes.is_main:
            optimizer = self.optimizer.state_dict()
            save_checkpoint(self.run_dir, step, self.model, self.saved_config, {**state, "optimizer": optimizer})
        self.last_step = step

    def _save_sharded(self, step: int, state: dict, weights: dict) -> None:
        """Every rank writes its optimizer shard into rank 0's folder; rank 0 commits it with the gathered
        ``weights``."""
        folder = self.processes.broadcast(new_checkpoint_folder(self.run_dir, step) if self.processes.is_main else None)
        with writing("checkpoint optimizer shard", folder):
            save_optimizer(self.model, self.optimizer, folder)
        self.processes.barrier()
        if self.processes.is_main:
            state["optimizer"] = SHARDED
            save_checkpoint(self.run_dir, step, self.model, self.saved_config, state, weights=weights, tmp=folder)
