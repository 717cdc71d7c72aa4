"""Periodic validation of a run in training on its task's held-out sequences, and whether it has fitted.

With ``fit_accuracy`` a run stops at the first validation whose full-sequence accuracy reaches it; every
rank must stop after the same step, so the verdict is the same on every rank.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..data import Task, TaskBatch
from ..models import TransformerLM
from .config import TrainConfig
from .distributed import Processes

VALIDATION_SEED = 1_000_000_007  # validation sequences never coincide with a training batch seed

ValidationFn = Callable[[TransformerLM, TaskBatch], dict]  # metrics of a model on a batch on its device


@torch.no_grad()
def validate(model: TransformerLM, config: TrainConfig, batch: TaskBatch, metrics_fn: ValidationFn) -> dict:
    """``metrics_fn`` of the model in eval mode on ``batch`` (the model's mode is restored after)."""
    was_training = model.training
    model.eval()
    metrics = metrics_fn(model, batch.to(config.device))
    model.train(was_training)
    return metrics


def _fitted(val: dict, fit_accuracy: float) -> bool:
    """Whether a validation reached ``fit_accuracy`` full-sequence accuracy (a ValueError if it has none)."""
    if "full_seq_acc" not in val:
        raise ValueError(
            f"TrainConfig.fit_accuracy = {fit_accuracy}: the validation metrics {sorted(val)} have no full_seq_acc; "
            "expected a task scored per sequence, or fit_accuracy = 0"
        )
    return val["full_seq_acc"] >= fit_accuracy


class Validator:
    """Validates every ``eval_every`` steps (and after the last) on rank 0, or on every rank of a sharded
    model, whose forward needs them all; answers "fitted?" the same on every rank."""

    def __init__(
        self,
        model: TransformerLM,
        config: TrainConfig,
        task: Task,
        metrics_fn: ValidationFn,
        processes: Processes,
        fsdp: bool,
    ):
        self.model, self.config, self.metrics_fn, self.processes, self.fsdp = model, config, metrics_fn, processes, fsdp
        self.batch = task.validation(config.eval_sequences, config.length, VALIDATION_SEED + config.seed)

    def due(self, step: int) -> bool:
        """Whether ``step`` is a validation step (the same answer on every rank)."""
        every = self.config.eval_every
        return bool(every) and (step % every == 0 or step == self.config.steps)

    def validate(self) -> dict | None:
        """The validation metrics on the ranks that validate, None on the others."""
        if not (self.processes.is_main or self.fsdp):
            return None
        return validate(self.model, self.config, self.batch, self.metrics_fn)

    def fitted(self, val: dict | None) -> bool:
        """Whether the run fitted at this validation: on every rank, rank 0's verdict under DDP (rank 0
        alone validated; every rank must call this at a validation step), each rank's own under FSDP."""
        fit_accuracy = self.config.fit_accuracy
        if not fit_accuracy:
            return False
        fitted = val is not None and _fitted(val, fit_accuracy)
        if self.processes.distributed and not self.fsdp:
            fitted = self.processes.any(self.processes.is_main and fitted, self.config.device)
        return fitted
