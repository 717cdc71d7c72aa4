"""What the length-generalisation tasks (mqar, selective_copy, majority) share: the check of ``sample``'s ``num``,
and test splits that shift one density field at the training length and then lengthen the sequences."""

from __future__ import annotations

import dataclasses

from ...utils.checks import is_int
from ..task import TEST_SEED, EvalSplit, Task, split_sequences

LONG_FACTORS = (2, 4, 8)  # the iid splits beyond the training length, as multiples of it


def check_num(task: str, num) -> int:
    if not is_int(num) or num < 0:
        raise ValueError(f"{task}: num = {num!r}; expected a non-negative integer")
    return num


def sparse_density(p: float) -> float:
    """Half the non-distractor fraction (for example three times the filler per content token at p = 0.5)."""
    return (1.0 + p) / 2


def dense_density(p: float) -> float:
    """Half the distractor fraction."""
    return p / 2


def density_splits(task: Task, field: str, train_length: int, sequences: int) -> list[EvalSplit]:
    """iid, sparse and dense (``field`` shifted) at the training length, then iid at 2x, 4x and 8x; split k
    uses TEST_SEED + k. A split the task cannot build at that length is a ValueError naming the split."""
    p = getattr(task, field)
    plan = [("iid", p, train_length), ("sparse", sparse_density(p), train_length)]
    plan += [("dense", dense_density(p), train_length)]
    plan += [("iid", p, factor * train_length) for factor in LONG_FACTORS]
    splits = []
    for index, (split, density, length) in enumerate(plan):
        shifted = dataclasses.replace(task, **{field: density})
        try:
            batch = shifted.sample(split_sequences(sequences, train_length, length), length, TEST_SEED + index)
        except ValueError as err:
            raise ValueError(f"{task.name}: the {split} split at train_length = {train_length}: {err}") from None
        splits.append(EvalSplit(split, dataclasses.asdict(shifted), batch))
    return splits
