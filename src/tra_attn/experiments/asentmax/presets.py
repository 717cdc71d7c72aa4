"""Presets of the ASEntmax authors' synthetic suite (the ``asentmax_*`` tasks, docs/asentmax_suite.md): per task, a
CPU recipe on the authors' training lengths, scaled down from their GPU budget, and a smoke test.

Their recipe (deep-spin/asentmax be54bd3f, ``synthetic/configs/experiment/entmax/*.yaml``,
``configs/model/sparse_gemma.yaml``, ``configs/data/*.yaml`` and the README's data commands): a Gemma-2 model of 2
to 6 layers, hidden 256 to 512, trained one epoch over 10M to 50M samples at batch 128 (78,125 to 390,625 steps),
AdamW without weight decay, bf16, and tested on 1,000 sequences per seq_len from 64 to 4096 (reverse to 512, MQMTAR
to 65,536). ``AUTHORS`` lists it per task; the page says by how much ours is smaller.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...data import make_task
from ...data.synthetic.asentmax_layout import FULL_TEST_SEQ_LEN, training_lengths
from ..preset import SMALL_MODEL, Preset, fit_recipe, smoke_preset

ASENTMAX_TASKS = (
    "asentmax_copy",
    "asentmax_reverse",
    "asentmax_sort",
    "asentmax_mqmtar",
    "asentmax_flip_flop",
    "asentmax_nback",
    "asentmax_local_count",
)
CPU_LONGEST = 4096  # the longest test seq_len on CPU (MQMTAR's authors go to 65,536: O(S^2) kinds cannot)
# Test sequences per length (the authors generate 1,000): one sequence moves a cell by 0.01 up to seq_len
# FULL_TEST_SEQ_LEN; beyond it the splits hold as many tokens (50 sequences at 2048, 25 at 4096).
TEST_SEQUENCES = 100


@dataclass(frozen=True)
class AuthorsRecipe:
    """What the authors train one task with: model, samples, batch and steps (None: they publish no experiment
    config for it, only the data command), and the file that says so."""

    layers: int | None
    hidden: int | None
    heads: int | None
    samples: int
    batch: int
    steps: int | None
    source: str


# deep-spin/asentmax be54bd3f: the experiment configs (synthetic/configs/experiment/entmax/) and the README's
# generate_data.py commands (--train_size); the data configs' batch_config.train.size is 128 for every task.
AUTHORS = {
    "asentmax_copy": AuthorsRecipe(2, 256, 16, 20_000_000, 128, 156_250, "experiment/entmax/copy.yaml"),
    "asentmax_reverse": AuthorsRecipe(6, 256, 8, 30_000_000, 128, 234_375, "experiment/entmax/reverse.yaml"),
    "asentmax_sort": AuthorsRecipe(2, 256, 8, 40_000_000, 128, 312_500, "experiment/entmax/sort.yaml"),
    "asentmax_mqmtar": AuthorsRecipe(4, 512, 16, 50_000_000, 128, 390_625, "experiment/entmax/mqmtar.yaml"),
    "asentmax_flip_flop": AuthorsRecipe(4, 256, 8, 10_000_000, 128, 78_125, "experiment/entmax/flip-flop.yaml"),
    "asentmax_nback": AuthorsRecipe(None, None, None, 10_000_000, 128, None, "README.md (2Back data)"),
    "asentmax_local_count": AuthorsRecipe(None, None, None, 10_000_000, 128, None, "README.md (LocalCount data)"),
}  # fmt: skip

CPU_STEPS = 2000
CPU_BATCH = 32  # a pilot at 1500 steps of 32 (d_model 64): flip-flop and 2-back fit, sort nearly, the rest not


def task_presets(task: str) -> dict[str, Preset]:
    """The cpu preset (the authors' training lengths as ``length`` and ``length_spread``, tests to seq_len 4096)
    and a smoke test of ``task``."""
    length, spread = training_lengths(make_task(task))
    longest = min(CPU_LONGEST, make_task(task).longest_test)
    authors = AUTHORS[task]
    scale = authors.samples / (CPU_STEPS * CPU_BATCH)
    return {
        "cpu": Preset(
            task_args={"longest_test": longest},  # the authors' range, cut at CPU_LONGEST (reverse: theirs, 512)
            model=SMALL_MODEL,  # head dim 16, as their copy's (reverse, sort and MQMTAR: 32)
            options={"cope": {"max_pos": length}},
            train=fit_recipe(
                length,
                CPU_STEPS,
                eval_every=100,
                checkpoint_every=500,
                length_spread=spread,
                batch_size=CPU_BATCH,
                warmup_steps=100,
                weight_decay=0.0,  # theirs (experiment configs: optimizer.weight_decay 0.0)
                beta2=0.99,  # theirs (sparse_gemma.yaml: betas [0.9, 0.99])
            ),
            eval_budget=TEST_SEQUENCES,
            description=f"2 layers, d_model 64, 4 heads; the authors' training lengths ({length} tokens with spread "
            f"{spread:.3f}), batch {CPU_BATCH}, trained to fit (validation exact match 0.99) within {CPU_STEPS} "
            f"steps: at most {CPU_STEPS * CPU_BATCH:,} samples, 1/{scale:,.0f} of the authors' {authors.samples:,}; "
            f"tested at seq_len 64-{longest}, {TEST_SEQUENCES} sequences per length to seq_len {FULL_TEST_SEQ_LEN} and "
            f"as many tokens beyond (the authors: 1,000 per length)",
        ),
        "tiny": smoke_preset(
            task_args={"longest_test": 128},
            length=length,
            length_spread=spread,
            eval_budget=8,
            description="smoke test (1 layer, d_model 16, 10 steps, tests at seq_len 64 and 128)",
        ),
    }


PRESETS: dict[str, dict[str, Preset]] = {task: task_presets(task) for task in ASENTMAX_TASKS}
