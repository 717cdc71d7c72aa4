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


def document_lengths(gen: torch.Generator, length: int, lengths: list[int]) -> list[int]:
    """Lengths of the documents of one row: each drawn uniformly from the valid ``lengths`` that fit in what is
    left of the row, while a document fits (the tail after the last is padding)."""
    out, left = [], length
    while left >= lengths[0]:
        fits = [n for n in lengths if n <= left]
        out.append(fits[int(torch.randint(len(fits), (), generator=gen))])
        left -= out[-1]
    return out


def spread_batch(task: Task, num: int, length: int, seed: int, spread: float) -> TaskBatch:
    """``num`` rows of ``length`` tokens, each packing documents of lengths in [(1 - spread) length, length]."""
    lengths = valid_lengths(task, math.ceil((1.0 - spread) * length), length)  # ``length`` itself is valid
    gen = torch.Generator().manual_seed(seed)
    plan = [document_lengths(gen, length, lengths) for _ in range(num)]
    # One sample call per distinct document length, its seed derived from the batch's: the same (seed, plan)
    # always gives the same documents.
    count = {n: sum(row.count(n) for row in plan) for n in {n for row in plan for n in row}}
    docs = {n: task.sample(c, n, (seed * 1_000_033 + n) % (1 << 63)) for n, c in sorted(count.items())}
    used = dict.fromkeys(docs, 0)
    tokens = torch.zeros(num, length, dtype=torch.long)
    mask = torch.zeros(num, length, dtype=torch.bool)
    segments = torch.full((num, length), PADDING, dtype=torch.int32)
    for r, row in enumerate(plan):
        start = 0
        for d, n in enumerate(row):
            batch, i = docs[n], used[n]
            tokens[r, start : start + n] = batch.tokens[i]
            mask[r, start : start + n] = batch.loss_mask[i]
            segments[r, start : start + n] = d
            used[n], start = i + 1, start + n
    return TaskBatch(tokens, mask, {"segment_ids": segments})
