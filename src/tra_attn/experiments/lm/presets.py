"""Language-modelling presets: corpus, tokenizer, model size, training recipe, evaluation budget (validation
tokens scored at every length; None: the whole text)."""

from __future__ import annotations

from ..methods import NO_THRESHOLD, RECOMMENDED, Method, as_first_run, randomized
from ..preset import SMOKE, Preset

# The cpu preset's validated rates: each the best on validation bits per byte in the sweep of results/text (the
# kinds, as this library first ran them and as their authors run them) or results/text_tra_variants (the TRA
# variants); tests/experiments/test_specs.py checks that they agree.
CPU_RATES = {
    **{as_first_run(Method(kind)): lr for kind, lr in {
        "tra": 1e-3, "nope": 1e-3, "rope": 3e-3, "alibi": 3e-3, "fox": 3e-3, "cope": 1e-3, "t5": 3e-3, "fire": 3e-3,
        "kerple": 3e-3, "stickbreaking": 3e-3, "ssmax": 1e-3, "asentmax": 1e-3,
    }.items()},
    **{Method(kind): lr for kind, lr in {
        "t5": 3e-3, "fire": 3e-3, "kerple": 3e-3, "stickbreaking": 3e-3, "ssmax": 3e-3, "asentmax": 3e-3,
        "softpick": 1e-3, "gated": 3e-3, "selective": 3e-3, "fox_pro": 3e-3, "path": 3e-3, "path_fox": 1e-3,
        "wall": 3e-3,
    }.items()},
    RECOMMENDED: 3e-3,
    randomized("rope", 2048): 3e-3,
    randomized("alibi", 2048): 1e-3,
    as_first_run(randomized("rope", 2048)): 3e-3,
    as_first_run(randomized("alibi", 2048)): 1e-3,
    NO_THRESHOLD: 3e-3,
    Method("tra", options={"threshold": -0.5}): 3e-3,
    Method("tra", options={"threshold": -1.0}): 1e-3,
    Method("tra", options={"dense_heads": 1}): 1e-3,
    Method("tra", options={"dense_heads": 2}): 1e-3,
    Method("tra", options={"threshold_warmup": 150}): 1e-3,
    Method("tra", options={"learned_temperature": True}): 1e-3,
    Method("tra", options={"gate_bias_init": 3.0}): 3e-3,
    Method("tra", model={"block_style": "paper"}): 1e-2,
}  # fmt: skip

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
        eval_budget=1 << 16,
        lrs=CPU_RATES,
        lrs_source="each selected on validation bits per byte by the sweeps of results/text and "
        "results/text_tra_variants",
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
        eval_budget=1024,
        lr=3e-3,
        lr_reason=SMOKE,
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
        eval_budget=None,
        description="WikiText-103, GPT-2 BPE; 12 layers, d_model 768, 12 heads; 50,000 steps of 64 x 512 tokens "
        "(1.6B tokens per method; estimated from 6 x params x tokens at 40% of an H200's bf16 peak: about 2 hours "
        "per method, not yet measured)",
    ),
}
