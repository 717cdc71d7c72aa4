"""Language-modelling presets: corpus, tokenizer, model size, training recipe, evaluation budget (validation
tokens scored at every length; None: the whole text)."""

from __future__ import annotations

from ..preset import Preset

# TRA and the baselines the paper compares against on text; the ablations are optional (--methods).
DEFAULT_METHODS = ("tra", "nope", "rope", "alibi", "fox", "cope")

PRESETS = {
    # Byte-level Austen on 2 CPU cores: five novels to train, Persuasion to validate.
    "cpu": Preset(
        task_args={"corpus": "austen", "tokenizer": "byte"},
        model=dict(d_model=128, n_layers=4, n_heads=4, block_style="prenorm", dropout=0.0),
        options={"cope": {"max_pos": 128}},
        train=dict(
            length=128,
            steps=600,
            batch_size=32,
            warmup_steps=50,
            min_lr_ratio=0.1,
            weight_decay=0.1,
            grad_clip=1.0,
            eval_every=100,
            eval_sequences=128,
            checkpoint_every=200,
        ),
        seeds=(0, 1),
        eval_budget=1 << 16,
        # Chosen on validation bits per byte by the sweep
        # `tra lm compare --preset cpu --lrs 3e-4 1e-3 3e-3 1e-2 --seeds 0 --out results/lm_austen`; the TRA
        # variants' by `tra lm compare --preset cpu --methods ... --lrs 1e-3 3e-3 1e-2 --seeds 0
        # --out results/tra_on_text` (results/tra_on_text.md).
        lrs={
            "tra": 1e-3,
            "nope": 1e-3,
            "rope": 3e-3,
            "alibi": 3e-3,
            "fox": 3e-3,
            "cope": 1e-3,
            "tra_nothreshold": 3e-3,
            "tra_threshold_m0p5": 3e-3,
            "tra_threshold_m1": 1e-3,
            "tra_dense1": 1e-3,
            "tra_dense2": 1e-3,
            "tra_warmup": 1e-3,
            "tra_temperature": 1e-3,
            "tra_gate3": 3e-3,
            "tra_paperblock": 1e-2,
        },
        description="byte-level Austen; 4 layers, d_model 128, 4 heads; 600 steps of 32 x 128 tokens; "
        "evaluated on 65,536 Persuasion bytes at 1x-16x",
    ),
    # A smoke test of the whole pipeline: seconds on a CPU, no meaningful numbers.
    "tiny": Preset(
        task_args={"corpus": "austen", "tokenizer": "byte"},
        model=dict(d_model=16, n_layers=1, n_heads=2, block_style="prenorm", dropout=0.0),
        options={"cope": {"max_pos": 16}},
        train=dict(
            length=16, steps=6, batch_size=4, warmup_steps=1, eval_every=3, eval_sequences=8, checkpoint_every=3
        ),
        seeds=(0,),
        eval_budget=1024,
        lr=3e-3,
        description="smoke test (1 layer, d_model 16, 16-byte windows, 6 steps)",
    ),
    # WikiText-103 with GPT-2 BPE at a paper-like size (a GPU job: --device cuda; data from --data-dir).
    "wikitext103": Preset(
        task_args={"corpus": "wikitext103", "tokenizer": "gpt2"},
        model=dict(d_model=768, n_layers=12, n_heads=12, block_style="prenorm", dropout=0.0),
        options={"cope": {"max_pos": 512}},
        train=dict(
            length=512,
            steps=50_000,
            batch_size=64,
            grad_accum=2,
            warmup_steps=2000,
            min_lr_ratio=0.1,
            weight_decay=0.1,
            grad_clip=1.0,
            eval_every=2000,
            eval_sequences=256,
            checkpoint_every=2000,
            precision="bf16",
        ),
        seeds=(0,),
        eval_budget=None,
        lr=3e-4,
        description="WikiText-103, GPT-2 BPE; 12 layers, d_model 768, 12 heads; 50,000 steps of 64 x 512 tokens "
        "(1.6B tokens per method; estimated from 6 x params x tokens at 40% of an H200's bf16 peak: about 2 hours "
        "per method, not yet measured)",
    ),
}
