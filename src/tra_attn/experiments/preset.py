"""The preset of a comparison: model, task parameters, recipe, learning rates, seeds, evaluation budget."""

from __future__ import annotations

from dataclasses import dataclass, field

from .methods import preset_lr


@dataclass(frozen=True)
class Preset:
    """``model`` and ``train`` are ModelConfig and TrainConfig fields, ``task_args`` the task's parameters,
    ``options`` attention options per kind (``{"cope": {"max_pos": 128}}``: what every run of that kind gets,
    before its method's own).

    ``eval_budget``: how much test data each run is evaluated on, in the experiment's unit (sequences per
    test split at the training length for a procedural task, validation tokens for language modelling;
    None: all of it). ``lrs``: validated learning rates per method; resolved by
    ``methods.preset_lr`` (the method's, its kind's, ``lr``, then the method's default rate); ``lrs_source``
    says where the validated rates come from (it goes on the page). With ``fit_accuracy`` in ``train`` the
    runs train to fit and ``steps`` is the cap (TrainConfig.fit_accuracy).
    """

    model: dict
    train: dict
    seeds: tuple[int, ...]
    eval_budget: int | None
    description: str
    task_args: dict = field(default_factory=dict)
    lrs: dict[str, float] = field(default_factory=dict)
    lr: float | None = None
    lrs_source: str = ""
    options: dict[str, dict] = field(default_factory=dict)

    def lr_for(self, method: str) -> float:
        return preset_lr(self.lrs, self.lr, method)

    def learning_rate_source(self, lrs: list[float] | None) -> str:
        """How a run without a sweep got its learning rates, for the page: one given rate, or the preset's."""
        if lrs:
            return f"Learning rate: {lrs[0]:g} for every method (given with --lrs; no sweep on validation data)."
        return f"Learning rates: the preset's{', ' + self.lrs_source if self.lrs_source else ''}."
