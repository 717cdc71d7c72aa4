"""Flip-flop presets: model size, training recipe, validated learning rates and test-set size."""

from __future__ import annotations

from ..fit import FIT_ACCURACY
from ..methods import (
    GATE_AT_KEY,
    NO_DISTANCE,
    NO_THRESHOLD,
    RECOMMENDED,
    RECOMMENDED_SPREAD,
    Method,
    as_first_run,
    randomized,
)
from ..preset import SMOKE, Preset

TASK_ARGS = {"p_ignore": 0.8, "final_read": True}  # train on FFL(0.8); every sequence ends with a read

# The cpu preset's validated rates (results/flipflop): every method of that page, the rivals both as this library
# first ran them (as_first_run) and as their authors run them.
CPU_RATES = {
    **{GATE_AT_KEY: 1e-3, NO_THRESHOLD: 1e-3, NO_DISTANCE: 1e-3},
    **{as_first_run(Method(kind)): lr for kind, lr in {
        "tra": 1e-3,
        "nope": 1e-3,
        "rope": 3e-3,
        "alibi": 1e-3,
        "fox": 1e-3,
        "cope": 1e-3,
        "t5": 1e-3,
        "fire": 1e-3,
        "kerple": 1e-3,
        "stickbreaking": 1e-3,
        "ssmax": 1e-3,
        "asentmax": 1e-3,
    }.items()},
    **{Method(kind): lr for kind, lr in {
        "t5": 3e-3, "kerple": 1e-3, "stickbreaking": 1e-3, "ssmax": 1e-3, "asentmax": 1e-3, "softpick": 1e-3,
        "gated": 1e-3, "selective": 1e-3, "fox_pro": 1e-3, "path": 1e-3, "path_fox": 1e-3, "wall": 1e-3,
    }.items()},
    RECOMMENDED: 1e-3,
    RECOMMENDED_SPREAD: 1e-3,
    as_first_run(randomized("rope", 1024)): 3e-3,
    as_first_run(randomized("alibi", 1024)): 3e-3,
    randomized("rope", 1024): 1e-3,
    randomized("alibi", 1024): 1e-3,
    **{method: 1e-3 for kind in ("rope", "alibi")
       for method in (as_first_run(randomized(kind, 1024, True)), randomized(kind, 1024, True))},
}  # fmt: skip

PRESETS = {
    # Trained to fit (validation full-sequence accuracy 0.99, checked every 100 steps) within 2000 steps. Every
    # method's rate is the one results/flipflop selects on held-out IID validation data (its sweep of 1e-3 and
    # 3e-3 on seed 0); tests/experiments/test_specs.py checks that they agree.
    "cpu": Preset(
        task_args=TASK_ARGS,
        model=dict(d_model=128, n_layers=2, n_heads=4, block_style="prenorm", dropout=0.0),
        options={"cope": {"max_pos": 128}},
        train=dict(
            length=128,
            steps=2000,
            batch_size=64,
            warmup_steps=50,
            weight_decay=0.01,
            grad_clip=1.0,
            eval_every=100,
            eval_sequences=512,
            checkpoint_every=200,
            fit_accuracy=FIT_ACCURACY,
        ),
        lrs=CPU_RATES,
        lrs_source="each selected on held-out IID validation data by the sweep of results/flipflop",
        eval_budget=1000,
        description="2 layers, d_model 128, 4 heads; 128-token FFL(0.8), batch 64, trained to fit (validation "
        "0.99) within 2000 steps; up to about 13 minutes per run on 2 CPU cores (a run that never fits trains to "
        "the cap)",
    ),
    # A smoke test of the whole pipeline: seconds on a CPU, no meaningful accuracy.
    "tiny": Preset(
        task_args=TASK_ARGS,
        model=dict(d_model=16, n_layers=1, n_heads=2, block_style="prenorm", dropout=0.0),
        options={"cope": {"max_pos": 16}},
        train=dict(
            length=16,
            steps=20,
            batch_size=8,
            warmup_steps=2,
            weight_decay=0.01,
            grad_clip=1.0,
            eval_every=10,
            eval_sequences=32,
            checkpoint_every=10,
        ),
        lr=3e-3,
        lr_reason=SMOKE,
        eval_budget=64,
        description="smoke test (1 layer, d_model 16, 16-token sequences, 20 steps)",
    ),
    # The TRA authors' notebook recipe (docs/flipflop.md; a GPU job).
    "paper": Preset(
        task_args=TASK_ARGS,
        # The notebook's model: its block, dropout 0.01 on the embeddings, the MLP hidden layer and the attention
        # logits (not the residual branches), and its initialisation (docs/flipflop.md lists what still differs).
        model=dict(
            d_model=256,
            n_layers=4,
            n_heads=4,
            block_style="paper",
            dropout=0.01,
            residual_dropout=False,
            attention_dropout=0.01,
            init_scheme="notebook",
        ),
        options={"cope": {"max_pos": 512}},
        train=dict(
            length=512,
            steps=25_000,
            batch_size=64,
            warmup_steps=0,
            weight_decay=0.01,
            grad_clip=0.0,
            eval_every=1000,
            eval_sequences=1000,
            checkpoint_every=1000,
            precision="bf16",
        ),
        lr=1e-4,
        lr_reason="the TRA authors' rate for every method: their notebook's protocol, not yet run here",
        eval_budget=4000,
        description="4 layers, d_model 256, 4 heads; 512-token FFL(0.8), batch 64, 25,000 steps, AdamW 1e-4, "
        "bf16 autocast (a GPU job: --device cuda)",
    ),
}
