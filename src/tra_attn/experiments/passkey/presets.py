"""Passkey presets: a CPU recipe trained to fit at a short length, tested on the length x depth grid, and a
smoke test. The grid's cost: ``eval_budget`` sequences per cell at the training length, the same token budget
per cell at 2x-16x (``Passkey.eval_splits``)."""

from __future__ import annotations

from ..preset import SMALL_MODEL, Preset, fit_recipe, smoke_preset

CPU_LENGTH = 64
CPU_TASK_ARGS = dict(key_digits=4)  # 4-digit keys in 54 filler tokens at the training length
# The cap: TRA at 1e-3 (seed 0) reached validation exact match 0.97 at step 850 of a 1000-step schedule, so 1000
# left no margin; 2000, as flip-flop's cpu preset.
TINY_TASK_ARGS = dict(key_digits=2)

PRESETS = {
    # No validated learning rates: every question on passkey sweeps a grid (results/passkey).
    "cpu": Preset(
        task_args=CPU_TASK_ARGS,
        model=SMALL_MODEL,
        options={"cope": {"max_pos": CPU_LENGTH}},  # CoPE's position table covers the training length
        train=fit_recipe(CPU_LENGTH, 2000, eval_every=50, checkpoint_every=500),
        eval_budget=128,
        description="2 layers, d_model 64, 4 heads; 64-token sequences with 4-digit keys, batch 32, trained to fit "
        "(validation exact match 0.99) within 2000 steps; tested at 64-1024 tokens and 5 depths (128 sequences "
        "per cell at 64 tokens, 8 at 1024); about 3 minutes per run that fits near step 800 on one CPU core, 8 for "
        "one that trains to the cap",
    ),
    "tiny": smoke_preset(
        task_args=TINY_TASK_ARGS,
        length=16,
        eval_budget=16,
        description="smoke test (1 layer, d_model 16, 16-token sequences with 2-digit keys, 10 steps)",
    ),
}
