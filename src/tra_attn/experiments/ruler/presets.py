"""Presets of the small RULER on synthetic tokens (the ``ruler_*`` tasks, docs/ruler_suite.md): per task, a CPU
recipe trained to fit at 128 tokens and tested at 1x-16x (needles at every depth), and a smoke test.

RULER itself evaluates pretrained instruction-following models and trains nothing; its lengths are 4k-128k tokens.
Ours is trained from scratch at 128 tokens on one task at a time: its numbers are not comparable with RULER's.
"""

from __future__ import annotations

from ..fit import FIT_ACCURACY
from ..preset import Preset

NEEDLE_TASKS = ("ruler_niah_single", "ruler_niah_multikey", "ruler_niah_multivalue", "ruler_niah_multiquery")
RULER_TASKS = (*NEEDLE_TASKS, "ruler_variable_tracking", "ruler_common_words", "ruler_frequent_words")
CPU_LENGTH = 128  # the longest shortest length of the defaults is multiquery's 75
# Common words at RULER's setting below 4096 tokens (freq_cw 6, freq_ucw 1; its `cwe` configuration's 30 and 3 need
# 313 tokens): the same 10 common words, each 6 times, among words that occur once.
TASK_ARGS = {"ruler_common_words": {"freq_cw": 6, "freq_ucw": 1}}
TINY_TASK_ARGS = {
    "ruler_niah_single": {"value_digits": 2},
    "ruler_niah_multikey": {"value_digits": 2, "num_needle_k": 2},
    "ruler_niah_multivalue": {"value_digits": 2, "num_needle_v": 2},
    "ruler_niah_multiquery": {"value_digits": 2, "num_needle_k": 2, "num_needle_q": 2},
    "ruler_variable_tracking": {"value_digits": 2, "num_hops": 1},
    "ruler_common_words": {"num_cw": 2, "freq_cw": 3, "freq_ucw": 1},
    "ruler_frequent_words": {"num_top": 1},
}
SMOKE = "a smoke test of the pipeline: its numbers are no evidence"


def task_presets(task: str) -> dict[str, Preset]:
    return {
        "cpu": Preset(
            task_args=TASK_ARGS.get(task, {}),
            model=dict(d_model=64, n_layers=2, n_heads=4, block_style="prenorm", dropout=0.0),
            options={"cope": {"max_pos": CPU_LENGTH}},  # CoPE's position table covers the training length
            train=dict(
                length=CPU_LENGTH,
                steps=2000,
                batch_size=32,
                warmup_steps=50,
                weight_decay=0.01,
                grad_clip=1.0,
                eval_every=100,
                eval_sequences=256,
                checkpoint_every=500,
                fit_accuracy=FIT_ACCURACY,
            ),
            eval_budget=64,
            description=f"2 layers, d_model 64, 4 heads; {CPU_LENGTH}-token sequences, batch 32, trained to fit "
            "(validation exact match 0.99) within 2000 steps; tested at 1x-16x (needles at 5 depths), 64 sequences "
            "per split at the training length and the same tokens beyond it",
        ),
        "tiny": Preset(
            task_args=TINY_TASK_ARGS[task],
            model=dict(d_model=16, n_layers=1, n_heads=2, block_style="prenorm", dropout=0.0),
            options={"cope": {"max_pos": 32}},
            train=dict(
                length=32,
                steps=10,
                batch_size=8,
                warmup_steps=2,
                eval_every=5,
                eval_sequences=16,
                checkpoint_every=10,
                fit_accuracy=FIT_ACCURACY,
            ),
            lr=3e-3,
            lr_reason=SMOKE,
            eval_budget=8,
            description="smoke test (1 layer, d_model 16, 32-token sequences, 10 steps)",
        ),
    }


PRESETS: dict[str, dict[str, Preset]] = {task: task_presets(task) for task in RULER_TASKS}
