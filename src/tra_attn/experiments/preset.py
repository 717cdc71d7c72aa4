"""The preset of a task: model, task parameters, recipe, evaluation budget, and the learning rates it knows.

A question that sweeps no learning rate for a method trains it at the preset's validated rate for that method
(``lrs``: rates chosen on validation data by the question ``lrs_source`` names). A method the preset has no rate
for is refused by name: no method ever trains at a silent fallback. A preset whose runs are no evidence (a
smoke test) or follow a published protocol may instead give one rate for every method (``lr``), saying why
(``lr_reason``); the page says it too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .fit import FIT_ACCURACY
from .methods import Method

SMOKE = "a smoke test of the pipeline: its numbers are no evidence"
# The procedural tasks' CPU model, and the smoke tests' model.
SMALL_MODEL = dict(d_model=64, n_layers=2, n_heads=4, block_style="prenorm", dropout=0.0)
TINY_MODEL = dict(d_model=16, n_layers=1, n_heads=2, block_style="prenorm", dropout=0.0)


@dataclass(frozen=True)
class Preset:
    """``model`` and ``train`` are ModelConfig and TrainConfig fields, ``task_args`` the task's parameters,
    ``options`` attention options per kind (``{"cope": {"max_pos": 128}}``: what every run of that kind gets,
    before its method's own). ``eval_budget``: how much test data each run is evaluated on, in the experiment's
    unit (sequences per test split at the training length for a procedural task, validation tokens for
    language modelling; None: all of it). With ``fit_accuracy`` in ``train`` the runs train to fit and
    ``steps`` is the cap."""

    model: dict
    train: dict
    eval_budget: int | None
    description: str
    task_args: dict = field(default_factory=dict)
    options: dict[str, dict] = field(default_factory=dict)
    lrs: Mapping[Method, float] = field(default_factory=dict)
    lrs_source: str = ""
    lr: float | None = None
    lr_reason: str = ""

    def __post_init__(self):
        if self.lr is not None and not self.lr_reason:
            raise ValueError(f"Preset({self.description!r}): lr = {self.lr} for every method; expected lr_reason")
        if self.lrs and not self.lrs_source:
            raise ValueError(f"Preset({self.description!r}): validated lrs; expected lrs_source, where they came from")
        for method, lr in self.lrs.items():
            if not (isinstance(method, Method) and isinstance(lr, float) and math.isfinite(lr) and lr > 0):
                raise ValueError(f"Preset({self.description!r}).lrs: {method!r}: {lr!r}; expected Method: rate")

    def rate_for(self, method: Method, preset: str) -> float:
        """The learning rate ``method`` trains at without a sweep, or a ValueError naming it and the preset."""
        for known, lr in self.lrs.items():
            if known.signature == method.signature:
                return lr
        if self.lr is not None:
            return self.lr
        raise ValueError(
            f"{method.label}: the {preset!r} preset has no learning rate chosen on validation data for it; "
            "expected a learning-rate grid for it (the question's lrs, or the method's own)"
        )

    def rate_source(self) -> str:
        """Where the preset's rates come from, for the page."""
        if self.lrs:
            return f"the preset's, {self.lrs_source}"
        return f"{self.lr:g} for every method ({self.lr_reason})"


def fit_recipe(length: int, steps: int, *, eval_every: int, checkpoint_every: int, **changes) -> dict:
    """The procedural tasks' CPU recipe, trained to fit within ``steps``: batch 32, 50 warm-up steps, weight decay
    0.01, gradient clipping 1.0, validation on 256 sequences every ``eval_every`` steps; ``changes`` on top."""
    recipe = dict(length=length, steps=steps, batch_size=32, warmup_steps=50, weight_decay=0.01, grad_clip=1.0,
                  eval_every=eval_every, eval_sequences=256, checkpoint_every=checkpoint_every,
                  fit_accuracy=FIT_ACCURACY)  # fmt: skip
    return {**recipe, **changes}


def smoke_preset(*, length: int, eval_budget: int, description: str, task_args=None, **changes) -> Preset:
    """A smoke test of the pipeline: the tiny model, 10 steps of 8 sequences at ``length`` (``changes`` on top), one
    rate for every method; CoPE's position table covers the length."""
    train = dict(length=length, steps=10, batch_size=8, warmup_steps=2, eval_every=5, eval_sequences=16,
                 checkpoint_every=10, fit_accuracy=FIT_ACCURACY)  # fmt: skip
    return Preset(
        task_args=task_args or {},
        model=TINY_MODEL,
        options={"cope": {"max_pos": length}},
        train={**train, **changes},
        lr=3e-3,
        lr_reason=SMOKE,
        eval_budget=eval_budget,
        description=description,
    )
