"""Training rows of documents of varied length, packed: ``TrainConfig.length_spread``.

A model trained on one length sees one number of irrelevant tokens per relevant one, and can learn to live
with the irrelevant keys it keeps. With a spread s, each training row of ``length`` tokens packs whole
documents of the task, each of a length drawn uniformly from the task's valid lengths in [(1 - s) length,
length] that fit in what is left of the row, separated by segment ids (no token attends across a document,
labels never cross one), so the number of irrelevant tokens around the same relevant ones varies within
training. A row's tail too short for a document is padding. The batch is a pure function of the step's batch
seed, like every batch.
"""

from __future__ import annotations

import math

import torch

from ..data import Task, TaskBatch
from ..ops.varlen import PADDING


def valid_lengths(task: Task, low: int, high: int) -> list[int]:
    """The lengths in [low, high] the task can generate (its ``check_length``), ascending."""
    valid = []
    for n in range(max(1, low), high + 1):
        try:
            task.check_length(n)
        except ValueError:
            continue
        valid.append(n)
    return valid


def document_lengths(gen: torch.Generator, length: int, lengths: list[int], extra: int = 0) -> list[int]:
    """Lengths of the documents of one row: each drawn uniformly from the valid ``lengths`` that fit in what is
    left of the row, while a document fits (the tail after the last is padding). A document of length n takes
    n + ``extra`` tokens of a row of ``length + extra`` (a text window holds one token more than its length)."""
    out, left = [], length + extra
    while left >= lengths[0] + extra:
        fits = [n for n in lengths if n + extra <= left]
        out.append(fits[int(torch.randint(len(fits), (), generator=gen))])
        left -= out[-1] + extra
    return out


def spread_lengths(task: Task, length: int, spread: float) -> list[int]:
    """The document lengths a spread draws from: the task's valid lengths in [(1 - spread) length, length]."""
    return valid_lengths(task, math.ceil((1.0 - spread) * length), length)


def check_spread_lengths(task: Task, length: int, spread: float) -> None:
    """A ValueError when the spread has no length to draw but ``length`` itself (it would change nothing)."""
    if spread_lengths(task, length, spread) == [length]:
        shorter = valid_lengths(task, 1, length - 1)[-3:]
        raise ValueError(
            f"TrainConfig.length_spread = {spread}: the {task.name} task has no valid length in "
            f"[{math.ceil((1.0 - spread) * length)}, {length}) to draw, so every document would be {length} tokens; "
            + (
                f"expected a spread reaching a shorter valid length (the nearest: {shorter})"
                if shorter
                else f"expected no spread (the task has no valid length below {length})"
            )
        )


def spread_batch(task: Task, num: int, length: int, seed: int, spread: float) -> TaskBatch:
    """``num`` rows of ``length`` tokens (as wide as the task's own rows of ``length``), each packing documents of
    lengths in [(1 - spread) length, length]."""
    lengths = spread_lengths(task, length, spread)  # ``length`` itself is valid
    probe = task.sample(1, length, seed)  # a row of the task's own, for its width and whether it has targets
    extra = probe.tokens.shape[1] - length  # text windows: one token more than the length
    gen = torch.Generator().manual_seed(seed)
    plan = [document_lengths(gen, length, lengths, extra) for _ in range(num)]
    # One sample call per distinct document length, its seed derived from the batch's: the same (seed, plan)
    # always gives the same documents.
    count = {n: sum(row.count(n) for row in plan) for n in {n for row in plan for n in row}}
    docs = {n: task.sample(c, n, (seed * 1_000_033 + n) % (1 << 63)) for n, c in sorted(count.items())}
    used = dict.fromkeys(docs, 0)
    width = length + extra
    tokens = torch.zeros(num, width, dtype=torch.long)
    targets = None if probe.targets is None else torch.zeros(num, width, dtype=torch.long)
    mask = torch.zeros(num, width, dtype=torch.bool)
    segments = torch.full((num, width), PADDING, dtype=torch.int32)
    for r, row in enumerate(plan):
        start = 0
        for d, n in enumerate(row):
            batch, i, end = docs[n], used[n], start + n + extra
            tokens[r, start:end] = batch.tokens[i]
            mask[r, start:end] = batch.loss_mask[i]
            if targets is not None:
                targets[r, start:end] = batch.targets[i]
            segments[r, start:end] = d
            used[n], start = i + 1, end
    return TaskBatch(tokens, mask, {"segment_ids": segments}, targets)
