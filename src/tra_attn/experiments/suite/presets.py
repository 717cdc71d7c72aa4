"""Presets of the length-generalisation suite: per task, a CPU recipe (trained to fit) and a smoke test.

Every task trains at a short length on 2 CPU cores and is tested at 2x, 4x and 8x that length and at
shifted densities (``docs/suite_tasks.md``, ``docs/hierarchy.md``).
"""

from __future__ import annotations

from ..preset import SMALL_MODEL, Preset, fit_recipe, smoke_preset

SUITE_TASKS = ("hierarchy", "mqar", "selective_copy", "majority")

# No validated learning rates: every question on these tasks sweeps a grid (results/majority, results/mqar, ...).
# Small models at a short length, trained to fit: a run stops once it fits (fit_recipe), so a question's runs take
# what each method needs, not the whole budget.
CPU_TRAIN = fit_recipe(64, 1000, eval_every=50, checkpoint_every=1000)

# The tasks' parameters at the suite's length (their defaults need 128 tokens or more).
TASK_ARGS = {
    "hierarchy": dict(r_count=2, conslen=4, depth=2, num_variables=2),
    "mqar": dict(num_pairs=4, num_keys=16, num_values=16),
    "selective_copy": dict(num_tokens=4, num_symbols=8),
    "majority": dict(num_marked=5),
}


def task_presets(task: str) -> dict[str, Preset]:
    args = TASK_ARGS[task]
    return {
        "cpu": Preset(
            task_args=args,
            model=SMALL_MODEL,
            options={"cope": {"max_pos": 64}},  # CoPE's position table covers the training length
            train=CPU_TRAIN,
            eval_budget=500,
            description="2 layers, d_model 64, 4 heads; 64-token sequences, batch 32, trained to fit "
            "(validation accuracy 0.99) within 1000 steps; under a minute per run on 2 CPU cores",
        ),
        "tiny": smoke_preset(
            task_args=args, length=64, eval_budget=16, description="smoke test (1 layer, d_model 16, 10 steps)"
        ),
    }


PRESETS: dict[str, dict[str, Preset]] = {t: task_presets(t) for t in SUITE_TASKS}
