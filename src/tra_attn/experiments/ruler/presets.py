"""Presets of the small RULER on synthetic tokens (the ``ruler_*`` tasks, docs/ruler_suite.md): per task, a CPU
recipe trained to fit at 128 tokens and tested at 1x-16x (needles at every depth), and a smoke test.

RULER itself evaluates pretrained instruction-following models and trains nothing; its lengths are 4k-128k tokens.
Ours is trained from scratch at 128 tokens on one task at a time: its numbers are not comparable with RULER's.
"""

from __future__ import annotations

from ..preset import SMALL_MODEL, Preset, fit_recipe, smoke_preset

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


def task_presets(task: str) -> dict[str, Preset]:
    return {
        "cpu": Preset(
            task_args=TASK_ARGS.get(task, {}),
            model=SMALL_MODEL,
            options={"cope": {"max_pos": CPU_LENGTH}},  # CoPE's position table covers the training length
            train=fit_recipe(CPU_LENGTH, 2000, eval_every=100, checkpoint_every=500),
            eval_budget=100,
            description=f"2 layers, d_model 64, 4 heads; {CPU_LENGTH}-token sequences, batch 32, trained to fit "
            "(validation exact match 0.99) within 2000 steps; tested at 1x-16x (needles at 5 depths), 100 sequences "
            "per split to 4x and the same tokens beyond it (50 at 8x, 25 at 16x)",
        ),
        "tiny": smoke_preset(
            task_args=TINY_TASK_ARGS[task],
            length=32,
            eval_budget=8,
            description="smoke test (1 layer, d_model 16, 32-token sequences, 10 steps)",
        ),
    }


PRESETS: dict[str, dict[str, Preset]] = {task: task_presets(task) for task in RULER_TASKS}
