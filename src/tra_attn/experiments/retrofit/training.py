"""Train a Hugging Face causal language model on windows of a token array, as ``tra train --task lm`` trains the
library's model: the same windows for the same (seed, step), AdamW without decay on 1-d parameters, linear warm-up
then cosine decay, gradient clipping (``training/optim.py``'s schedule and optimiser, which read a ``Recipe``'s fields
as they read a TrainConfig's).

A continuation starts its batches at ``first_step`` (a converted model continues where its base stopped, on windows
it has not drawn) with a schedule of its own: a fresh warm-up to its peak and a cosine over its own steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ...data.text.windows import batch_from_windows, train_window_starts
from ...training.config import check_seed
from ...training.loop import batch_seed
from ...training.optim import build_optimizer, learning_rate
from ...utils.checks import is_int


@dataclass(frozen=True)
class Recipe:
    """``steps`` optimizer steps of ``batch_size`` windows of ``length`` tokens; peak ``lr`` after ``warmup_steps``,
    cosine to ``lr * min_lr_ratio`` at the last step; AdamW (``weight_decay``, ``beta1``, ``beta2``), gradients
    clipped to norm ``grad_clip`` (0: not clipped); batches of (``seed``, ``first_step + step``)."""

    steps: int
    lr: float
    batch_size: int = 32
    length: int = 128
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0
    seed: int = 0
    first_step: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size", "length"):
            value = getattr(self, name)
            if not is_int(value) or value <= 0:
                raise ValueError(f"Recipe.{name} = {value!r}; expected a positive integer")
        for name in ("warmup_steps", "first_step"):
            value = getattr(self, name)
            if not is_int(value) or value < 0:
                raise ValueError(f"Recipe.{name} = {value!r}; expected a non-negative integer")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"Recipe.lr = {self.lr!r}; expected a positive number")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"Recipe.min_lr_ratio = {self.min_lr_ratio!r}; expected a number in [0, 1]")
        check_seed(self.seed, "Recipe.seed")

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def train_causal_lm(
    model, tokens: np.ndarray, recipe: Recipe, progress: Callable[[int, float], None] | None = None
) -> dict:
    """Train ``model`` (a Hugging Face causal LM) in place on windows of ``tokens`` with ``recipe``; returns what the
    training did (its seconds, the mean loss of its last tenth of steps). ``progress(step, loss)`` after each step.
    A non-finite loss stops it with a ValueError naming the step."""
    if len(tokens) < recipe.length + 1:
        raise ValueError(f"train_causal_lm: {len(tokens)} tokens; expected at least length + 1 = {recipe.length + 1}")
    device = next(model.parameters()).device
    optimizer = build_optimizer(model, recipe)
    model.train()
    losses, start = [], time.perf_counter()
    for step in range(recipe.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(recipe, step)
        seed = batch_seed(recipe.seed, recipe.first_step + step)
        starts = train_window_starts(len(tokens), recipe.length, recipe.batch_size, seed, 0)
        inputs, labels = batch_from_windows(tokens, starts, recipe.length)
        logits = model(input_ids=inputs.to(device), use_cache=False).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.to(device).flatten())
        if not torch.isfinite(loss):
            raise ValueError(f"train_causal_lm: the loss is {loss.item()} at step {step}; expected a finite loss")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if recipe.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step, losses[-1])
    model.eval()
    tail = losses[-max(1, len(losses) // 10) :]
    return {"train_seconds": time.perf_counter() - start, "final_loss": sum(tail) / len(tail)}
