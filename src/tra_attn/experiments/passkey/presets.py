"""Passkey presets: a CPU recipe trained to fit at a short length, tested on the length x depth grid, and a
smoke test. The grid's cost: ``eval_budget`` sequences per cell at the training length, the same token budget
per cell at 2x-16x (``Passkey.eval_splits``)."""

from __future__ import annotations

from ..fit import FIT_ACCURACY
from ..preset import Preset

CPU_LENGTH = 64
CPU_TASK_ARGS = dict(key_digits=4)  # 4-digit keys in 54 filler tokens at the training length
# The cap: TRA at 1e-3 (seed 0) reached validation exact match 0.97 at step 850 of a 1000-step schedule, so 1000
# left no margin; 2000, as flip-flop's cpu preset.
TINY_TASK_ARGS = dict(key_digits=2)

PRESETS = {
    # No validated learning rates: every question on passkey sweeps a grid (results/passkey).
    "cpu": Preset(
        task_args=CPU_TASK_ARGS,
        model=dict(d_model=64, n_layers=2, n_heads=4, block_style="prenorm", dropout=0.0),
        options={"cope": {"max_pos": CPU_LENGTH}},  # CoPE's position table covers the training length
        train=dict(
            length=CPU_LENGTH,
            steps=2000,
            batch_size=32,
            warmup_steps=50,
            weight_decay=0.01,
            grad_clip=1.0,
            eval_every=50,
            eval_sequences=256,
            checkpoint_every=500,
            fit_accuracy=FIT_ACCURACY,
        ),
        eval_budget=128,
        description="2 layers, d_model 64, 4 heads; 64-token sequences with 4-digit keys, batch 32, trained to fit "
        "(validation exact match 0.99) within 2000 steps; tested at 64-1024 tokens and 5 depths (128 sequences "
        "per cell at 64 tokens, 8 at 1024); about 3 minutes per run that fits near step 800 on one CPU core, 8 for "
        "one that trains to the cap",
    ),
    "tiny": Preset(
        task_args=TINY_TASK_ARGS,
        model=dict(d_model=16, n_layers=1, n_heads=2, block_style="prenorm", dropout=0.0),
        options={"cope": {"max_pos": 16}},
        train=dict(
            length=16,
            steps=10,
            batch_size=8,
            warmup_steps=2,
            eval_every=5,
            eval_sequences=16,
            checkpoint_every=10,
            fit_accuracy=FIT_ACCURACY,
        ),
        lr=3e-3,
        lr_reason="a smoke test of the pipeline: its numbers are no evidence",
        eval_budget=16,
        description="smoke test (1 layer, d_model 16, 16-token sequences with 2-digit keys, 10 steps)",
    ),
}
