"""What the retrofit experiment trains and evaluates: its stages (the base RoPE Llama, each conversion's continued
trainings, TRA from scratch) and its rows (a stage, with a RoPE scaling at evaluation or without).

- ``rope``: a fresh LlamaForCausalLM (RoPE), trained on the preset's text budget at the preset's rate for RoPE;
- ``<kind>_<rope>[_<settings>]_<steps>_lr<rate>``: the base converted by ``add_attention(kind, rope=..., **settings)``
  (default settings, and TRA's recommended configuration with RoPE kept; fresh gates), trained ``steps`` more (10% and
  25% of the base's) on the batches after the base's, with a fresh warm-up to a peak ``rate`` of the preset's
  ``continue_lrs`` and a cosine to ``min_lr_ratio`` of it over the continuation's own steps; the page shows, for each
  conversion and length, the rate best on the selection tokens;
- ``tra_scratch``: the same fresh Llama (same seed: the same initial weights) with ``add_tra(rope="remove")``, trained
  like the base at the preset's rate for TRA.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..methods import RECOMMENDED
from .presets import CONTINUE_FRACTIONS, RetrofitPreset
from .scaling import SCALINGS
from .stages import Stage, StageCache
from .training import Recipe, train_causal_lm

VERSION = 1  # of what a stage's spec means: raise it when the code changes what a stage trains
CONVERSIONS = (  # (kind, rope, settings, label): the converted rows, in the page's order
    ("tra", "keep", {}, "TRA, RoPE kept"),
    ("tra", "keep", RECOMMENDED.options, f"{RECOMMENDED.label}, RoPE kept"),  # for new models (docs/invariance.md)
    ("tra", "remove", {}, "TRA, RoPE removed"),
    ("fox", "remove", {}, "FoX"),
    ("alibi", "remove", {}, "ALiBi"),
)


def continuation_name(kind: str, rope: str, settings: dict, steps: int, lr: float) -> str:
    """A continuation's stage name: 'tra_keep_60_lr0.001', 'tra_keep_local_window4_keep_surrogate1_60_lr0.001', ..."""
    return "_".join([kind, rope, *(f"{key}{value:g}" for key, value in settings.items()), str(steps), f"lr{lr:g}"])


@dataclass(frozen=True)
class Row:
    """A row of the page: ``label``, the ``stage`` it evaluates, the RoPE ``scaling`` applied at evaluation (None:
    none), and its training as the page says it (``steps``: the stage's own; ``base_steps``: before them)."""

    label: str
    stage: Stage
    scaling: str | None
    steps: int
    base_steps: int = 0
    lr: float | None = None


@dataclass(frozen=True)
class Continuation:
    """A converted row before its rate is chosen: its page ``label``, the ``steps`` it trains after the base's, and its
    stage at each rate of the preset's ``continue_lrs``."""

    label: str
    steps: int
    stages: dict[float, Stage]


def base_recipe(preset: RetrofitPreset, seed: int) -> Recipe:
    """The base's recipe: the lm preset's length, steps, batch and schedule at its rate for RoPE."""
    config = preset.train
    return Recipe(
        steps=config.steps, lr=preset.rate("rope"), batch_size=config.batch_size, length=config.length,
        warmup_steps=config.warmup_steps, min_lr_ratio=config.min_lr_ratio, weight_decay=config.weight_decay,
        beta1=config.beta1, beta2=config.beta2, grad_clip=config.grad_clip, seed=seed,
    )  # fmt: skip


def continue_recipe(preset: RetrofitPreset, seed: int, steps: int, lr: float) -> Recipe:
    """A continuation's recipe: ``steps`` from the base's last step on, a warm-up of its own to the peak ``lr``."""
    base = base_recipe(preset, seed)
    return replace(base, steps=steps, lr=lr, warmup_steps=preset.continue_warmup, first_step=base.steps)


def fresh_llama(sizes: dict, seed: int):
    """A LlamaForCausalLM of ``sizes`` initialised from ``seed``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**sizes))


def stages(preset: RetrofitPreset, seed: int, tokens: np.ndarray, vocab_size: int, cache: StageCache) -> dict:
    """Every stage, by name: 'rope', 'tra_scratch' and one per conversion and continuation length."""
    from ...hf import add_attention, add_tra

    sizes = preset.llama_sizes(vocab_size)
    common = {"version": VERSION, "model": sizes, "data": preset.task_args, "seed": seed}
    recipe = base_recipe(preset, seed)
    found = {
        "rope": Stage(
            "rope",
            {**common, "recipe": recipe.as_dict()},
            lambda: _trained(fresh_llama(sizes, seed), tokens, recipe),
        )
    }
    scratch = replace(recipe, lr=preset.rate("tra"))
    found["tra_scratch"] = Stage(
        "tra_scratch",
        {**common, "recipe": scratch.as_dict(), "attention": {"kind": "tra", "rope": "remove"}},
        lambda: _trained(add_tra(fresh_llama(sizes, seed), rope="remove"), tokens, scratch),
    )
    base = found["rope"]
    for kind, rope, settings, _ in CONVERSIONS:
        attention = {"kind": kind, "rope": rope, **settings}
        for fraction in CONTINUE_FRACTIONS:
            steps = preset.continue_steps(fraction)
            for lr in preset.continue_lrs:
                more = continue_recipe(preset, seed, steps, lr)

                def convert_and_train(attention=attention, more=more):
                    model = copy.deepcopy(cache.model(base))
                    torch.manual_seed(seed)  # the gates' initialisation
                    return _trained(add_attention(model, **attention), tokens, more)

                name = continuation_name(kind, rope, settings, steps, lr)
                spec = {"version": VERSION, "base": base.id, "attention": attention}
                found[name] = Stage(name, {**spec, "recipe": more.as_dict()}, convert_and_train)
    return found


def _trained(model, tokens: np.ndarray, recipe: Recipe):
    return model, train_causal_lm(model, tokens, recipe)


def continuations(preset: RetrofitPreset, found: dict) -> list[Continuation]:
    """Each conversion after 10% and 25% more steps, with its stage at every rate, in the page's order."""
    listed = []
    for kind, rope, settings, label in CONVERSIONS:
        for fraction in CONTINUE_FRACTIONS:
            steps = preset.continue_steps(fraction)
            by_rate = {lr: found[continuation_name(kind, rope, settings, steps, lr)] for lr in preset.continue_lrs}
            listed.append(Continuation(f"{label}, +{round(100 * fraction)}%", steps, by_rate))
    return listed


def chosen_rate(values: dict[float, float]) -> float:
    """The rate of the lowest selection value ({rate: bits per byte}); a tie goes to the smaller rate."""
    return min(values, key=lambda lr: (values[lr], lr))


def rows(preset: RetrofitPreset, found: dict, chosen: dict[str, float]) -> list[Row]:
    """The page's rows, in its order: RoPE and its scalings, each conversion after 10% and 25% more at its chosen
    rate (``chosen``: by the continuation's label), TRA from scratch."""
    steps = preset.train.steps
    base = found["rope"]
    listed = [Row("RoPE", base, None, steps, lr=preset.rate("rope"))]
    listed += [Row(f"RoPE + {label}", base, scaling, steps) for scaling, label in SCALINGS.items()]
    for more in continuations(preset, found):
        lr = chosen[more.label]
        listed.append(Row(more.label, more.stages[lr], None, more.steps, steps, lr))
    listed.append(Row("TRA from scratch", found["tra_scratch"], None, steps, lr=preset.rate("tra")))
    return listed
