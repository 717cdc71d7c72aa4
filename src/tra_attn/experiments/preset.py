"""The preset of a comparison on a procedural task: model, task parameters, recipe, learning rates, seeds."""

from __future__ import annotations

from dataclasses import dataclass, field

from .runs import preset_lr


@dataclass(frozen=True)
class Preset:
    """``model`` and ``train`` are ModelConfig and TrainConfig fields, ``task_args`` the task's parameters.

    ``lrs``: validated learning rates per method; a method without one uses ``lr`` if set, else its
    registry default (so a newly registered kind runs with no preset change). With ``fit_accuracy`` in
    ``train`` the runs train to fit and ``steps`` is the cap (TrainConfig.fit_accuracy).
    """

    model: dict
    train: dict
    seeds: tuple[int, ...]
    eval_sequences: int
    description: str
    task_args: dict = field(default_factory=dict)
    lrs: dict[str, float] = field(default_factory=dict)
    lr: float | None = None

    def lr_for(self, method: str) -> float:
        return preset_lr(self.lrs, self.lr, method)
