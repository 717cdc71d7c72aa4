"""The haystack of the RULER needle and variable-tracking tasks, and how units (needles, assignments) go into it.

Follows NVIDIA/RULER at commit c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a, scripts/data/synthetic/niah.py and
variable_tracking.py. Their 'noise' haystack is one sentence repeated ("The grass is green. The sky is blue. The sun
is yellow. Here we go. There and back again."); ours is the filler symbols 'a'..'p' in a cycle, which a unit
interrupts and which resumes after it. Their 'essay' haystack is Paul Graham's essays, text that never repeats and
holds no needle; ours is filler symbols drawn uniformly at random (no text, no download). In their noise haystack
a unit goes between two sentences at a uniformly random place; here between two haystack tokens, at a uniformly
random one of the H + 1 places of H tokens (their essay haystack draws the place from 40 depths instead).

A unit's place is given by a key in [0, H + 1): floor(key) haystack tokens precede it, and units at the same place
follow one another in the order of their keys.
"""

from __future__ import annotations

import torch

from .ruler_layout import FILLER0, NUM_FILLER, round_half_up


def haystack(kind: str, num: int, size: int, gen: torch.Generator) -> torch.Tensor:
    """(num, size) filler tokens: the symbols in a cycle ('noise') or drawn uniformly ('essay')."""
    if kind == "noise":
        return (torch.arange(size) % NUM_FILLER + FILLER0).expand(num, size).clone()
    return torch.randint(NUM_FILLER, (num, size), generator=gen) + FILLER0


def place_keys(num: int, units: int, size: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniform places for ``units`` units in a haystack of ``size`` tokens: (keys, r), keys (num, units) float64,
    each in [q, q + 1) for its place q, and r the uniform draws that order units within a place (for
    ``depth_keys``)."""
    q = torch.randint(size + 1, (num, units), generator=gen).double()
    side = torch.randint(2, (num, units), generator=gen).double()
    r = torch.rand(num, units, generator=gen, dtype=torch.float64)
    return q + (2 * side + r) / 3, r


def depth_keys(keys: torch.Tensor, r: torch.Tensor, block: torch.Tensor, depth: float, size: int) -> torch.Tensor:
    """``keys`` with the ``block`` units (num, units) moved to the place round(depth * size), one after another
    in a random order; the other units keep their places (one that shares the block's goes before or after it)."""
    start = round_half_up(depth * size)
    return torch.where(block, start + (1 + r) / 3, keys)


def insert_units(
    filler: torch.Tensor, units: torch.Tensor, widths: torch.Tensor, keys: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The haystack ``filler`` (num, H) with the units inserted at their ``keys`` (num, U): (tokens, rank).

    ``units`` (num, U, W) holds each unit's tokens, of which the first ``widths`` (num, U) are used; every row's
    widths must add up to the same total. ``rank`` (num, U) is each unit's place in the order of appearance.
    """
    num, size = filler.shape
    order = keys.argsort(dim=1, stable=True)
    rank = order.argsort(dim=1)
    widths_sorted = widths.gather(1, order)
    units_sorted = units.gather(1, order[..., None].expand_as(units))
    points = keys.gather(1, order).floor().long()
    starts = points + widths_sorted.cumsum(dim=1) - widths_sorted
    total = size + int(widths[0].sum()) if num else size
    out = torch.full((num, total + 1), -1)  # the last column takes the writes of unused unit slots
    for offset in range(units.shape[2]):
        where = torch.where(offset < widths_sorted, starts + offset, total)
        out.scatter_(1, where, units_sorted[..., offset])
    out = out[:, :total]
    out[out < 0] = filler.reshape(-1)  # the free places in order, row by row: the haystack, in order
    return out, rank
