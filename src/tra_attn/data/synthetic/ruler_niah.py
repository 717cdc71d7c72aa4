"""RULER's needle-in-a-haystack tasks on synthetic tokens: ``ruler_niah_single``, ``ruler_niah_multikey``,
``ruler_niah_multivalue`` and ``ruler_niah_multiquery`` (docs/ruler_suite.md).

Follows NVIDIA/RULER at commit c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a: the generator
scripts/data/synthetic/niah.py (``generate_input_output``: num_needle_k keys, num_needle_v values per key, one
needle per value, num_needle_q of the keys queried, the answer every value of every queried key; values
``generate_random_number``: 7 digits, 1000000..9999999) and the configurations niah_single_1, niah_multikey_1,
niah_multivalue and niah_multiquery of scripts/synthetic.yaml, whose counts and haystacks are these tasks'
defaults. Scored as their ``string_match_all`` (scripts/eval/synthetic/constants.py) reads: every value.

Grammar (the vocabulary is ruler_layout.py's):

    sequence := haystack with needles inserted, '?' key{Q} ':' value{Q V}     exactly `length` tokens
    needle   := '#' key '=' digit{D}        one per (key, value); keys distinct words, D = value_digits
    answer   := for each queried key in query order, its values in the order they appear

    a b c d # w17 = 4 0 9 2 8 1 3 e f g h i j ? w17 : 4 0 9 2 8 1 3            (single, noise haystack)

Depth: with ``depth`` = d the needles of the queried keys (the ones whose values are scored) sit one after
another after round(d H) of the H haystack tokens (0: before every haystack token, 1: after all of them, just
before the query); the other needles stay where they were drawn. ``depth=None`` (training) places every needle
at a uniformly random one of the H + 1 places, RULER's noise-haystack placement. One seed gives the same keys,
values, haystack and other needles at every depth: only the queried needles move.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...utils.checks import int_in_range, option
from ..task import EvalSplit, TaskBatch, register_task
from .passkey import DEPTH, length_depth_splits
from .ruler_haystack import depth_keys, haystack, insert_units, place_keys
from .ruler_layout import (
    ANSWER,
    FILLER0,
    MARK,
    QUERY,
    SEP,
    WORD0,
    RulerTask,
    check_num,
    digits_of,
    haystack_kind,
    is_filler,
    is_word,
    mean,
)

HELP_K = "distinct keys, each with its needles (RULER's num_needle_k)"
HELP_V = "values (needles) per key (RULER's num_needle_v)"
HELP_Q = "keys queried, at most num_needle_k (RULER's num_needle_q)"
HELP_HAYSTACK = "'noise' (RULER's repeated sentence: filler symbols in a cycle) or 'essay' (filler drawn at random)"


@dataclass(frozen=True)
class RulerNeedles(RulerTask):
    """RULER's niah generator: needles (key, digit value) in a haystack, queried keys, their values answered."""

    num_needle_k: int = option(1, HELP_K, int_in_range(1))
    num_needle_v: int = option(1, HELP_V, int_in_range(1))
    num_needle_q: int = option(1, HELP_Q, int_in_range(1))
    value_digits: int = option(7, "digits of a value, the first nonzero (RULER's 7)", int_in_range(1))
    haystack: str = option("noise", HELP_HAYSTACK, haystack_kind)
    depth: float | None = option(
        None,
        "where the queried needles sit, as a fraction of the haystack before them, in [0, 1] "
        "(default: every needle at a uniform place, the training distribution)",
        DEPTH,
        flag_type=float,
    )
    num_words: int = option(64, "the key vocabulary (words w0...), at least num_needle_k", int_in_range(1))

    def __post_init__(self):
        super().__post_init__()
        if self.num_needle_q > self.num_needle_k:
            raise ValueError(
                f"{self.name}: num_needle_q = {self.num_needle_q}; expected at most num_needle_k = "
                f"{self.num_needle_k} (the queried keys are distinct keys of the needles)"
            )
        if self.num_words < self.num_needle_k:
            raise ValueError(
                f"{self.name}: num_words = {self.num_words}; expected at least num_needle_k = {self.num_needle_k} "
                "(the keys of a sequence are distinct words)"
            )

    @property
    def item_width(self) -> int:
        return self.value_digits

    @property
    def needles(self) -> int:
        return self.num_needle_k * self.num_needle_v

    def fixed_tokens(self) -> int:
        """The tokens of every sequence but the haystack: the needles, the query and the answer."""
        q, v, d = self.num_needle_q, self.num_needle_v, self.value_digits
        return self.needles * (3 + d) + (q + 2) + q * v * d

    def haystack_tokens(self, length: int) -> int:
        """H: the haystack tokens of a ``length``-token sequence."""
        return length - self.fixed_tokens()

    def min_length(self) -> int:
        return self.fixed_tokens() + 1

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same ones, at every depth the same
        keys, values, haystack and unqueried needles."""
        self.check_length(length)
        check_num(self.name, num)
        gen = torch.Generator().manual_seed(seed)
        k, v, q, d = self.num_needle_k, self.num_needle_v, self.num_needle_q, self.value_digits
        size = self.haystack_tokens(length)
        keys = torch.rand(num, self.num_words, generator=gen).argsort(dim=1, stable=True)[:, :k] + WORD0
        values = digits_of(torch.randint(10 ** (d - 1), 10**d, (num, k, v), generator=gen), d)  # (num, k, v, d)
        asked = torch.rand(num, k, generator=gen).argsort(dim=1, stable=True)[:, :q]  # queried keys, query order
        filler = haystack(self.haystack, num, size, gen)
        places, r = place_keys(num, k * v, size, gen)
        needle_key = torch.arange(k).repeat_interleave(v)  # the key of each needle, (key, value) order
        if self.depth is not None:
            block = (needle_key[None, :, None] == asked[:, None, :]).any(dim=2)
            places = depth_keys(places, r, block, self.depth, size)
        units = torch.cat(
            [
                torch.full((num, k * v, 1), MARK),
                keys.repeat_interleave(v, dim=1)[..., None],
                torch.full((num, k * v, 1), SEP),
                values.reshape(num, k * v, d),
            ],
            dim=2,
        )
        context, rank = insert_units(filler, units, torch.full((num, k * v), 3 + d), places)
        by_appearance = rank.view(num, k, v).argsort(dim=2)  # each key's values in the order they appear
        ordered = values.gather(2, by_appearance[..., None].expand(num, k, v, d))
        answer = ordered.gather(1, asked[:, :, None, None].expand(num, q, v, d)).reshape(num, q * v * d)
        query = torch.cat([torch.full((num, 1), QUERY), keys.gather(1, asked), torch.full((num, 1), ANSWER)], dim=1)
        tokens = torch.cat([context, query, answer], dim=1)
        return TaskBatch(tokens, self.loss_mask(tokens))

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """Passkey's length x depth grid: at 1x, 2x, 4x, 8x and 16x the training length, every depth of DEPTHS
        (splits 'depth0' ... 'depth1'); the depths of one length share their seed, TEST_SEED + the length's index."""
        return length_depth_splits(self, train_length, sequences)

    def solve(self, context: list[int], query: list[int]) -> list[int]:
        """Each queried key's values in order of appearance; checks the needles and the query."""
        d = self.value_digits
        values: dict[int, list[list[int]]] = {}
        i = 0
        while i < len(context):
            t = context[i]
            if t == MARK:
                needle = context[i : i + 3 + d]
                ok = len(needle) == 3 + d and needle[1] >= WORD0 and needle[2] == SEP
                if not (ok and all(x < 10 for x in needle[3:]) and needle[3] != 0):
                    raise ValueError(f"expected every needle to be '#' key '=' and {d} digits, the first nonzero")
                values.setdefault(needle[1], []).append(needle[3:])
                i += 3 + d
            elif FILLER0 <= t < WORD0:
                i += 1
            else:
                raise ValueError("expected only filler symbols and needles before '?'")
        k, v, q = self.num_needle_k, self.num_needle_v, self.num_needle_q
        if len(values) != k or any(len(found) != v for found in values.values()):
            raise ValueError(f"expected {k} distinct keys with {v} needle(s) each")
        if len(query) != q or len(set(query)) != q or any(key not in values for key in query):
            raise ValueError(f"expected {q} distinct keys of the needles between '?' and ':'")
        return [digit for key in query for value in values[key] for digit in value]

    def statistics(self, batch: TaskBatch) -> dict:
        """Needles, the answer's length, the depth of the queried needles (haystack tokens before the first of
        them over H) and their distance to '?' ('#' to '?'), and the haystack fraction."""
        tokens = batch.tokens
        n, length = tokens.shape
        q = self.num_needle_q
        question = (tokens == QUERY).long().argmax(dim=1)
        pos = torch.arange(length).expand(n, length)
        asked = tokens.gather(1, (question[:, None] + 1 + torch.arange(q)).clamp(max=length - 1))
        following = torch.roll(tokens, -1, dims=1)
        marks = (tokens == MARK) & (pos < question[:, None])
        queried = marks & (following[..., None] == asked[:, None, :]).any(dim=2) & is_word(following)
        filler = is_filler(tokens)
        before = filler.long().cumsum(dim=1) - filler.long()
        first = torch.where(queried, pos, length).min(dim=1).values.clamp(max=length - 1)
        size = filler.sum(dim=1).clamp(min=1)
        distances = (question[:, None] - pos)[queried]
        return {
            **self.base_statistics(batch),
            "needles_per_sequence": mean(marks.sum(dim=1)),
            "queried_needles_per_sequence": mean(queried.sum(dim=1)),
            "mean_depth": mean(before.gather(1, first[:, None])[:, 0].double() / size),
            "mean_needle_distance": mean(distances),
            "max_needle_distance": distances.max().item() if distances.numel() else math.nan,
            "haystack_fraction": mean(filler.double()),
        }


@register_task
@dataclass(frozen=True)
class RulerNiahSingle(RulerNeedles):
    """RULER niah_single_1: one needle (key, 7-digit value) in a repeated haystack, its key queried."""

    name = "ruler_niah_single"


@register_task
@dataclass(frozen=True)
class RulerNiahMultikey(RulerNeedles):
    """RULER niah_multikey_1: four needles of distinct keys in random filler, one key queried."""

    num_needle_k: int = option(4, HELP_K, int_in_range(1))
    haystack: str = option("essay", HELP_HAYSTACK, haystack_kind)

    name = "ruler_niah_multikey"


@register_task
@dataclass(frozen=True)
class RulerNiahMultivalue(RulerNeedles):
    """RULER niah_multivalue: four needles of one key in random filler, all four values answered."""

    num_needle_v: int = option(4, HELP_V, int_in_range(1))
    haystack: str = option("essay", HELP_HAYSTACK, haystack_kind)

    name = "ruler_niah_multivalue"


@register_task
@dataclass(frozen=True)
class RulerNiahMultiquery(RulerNeedles):
    """RULER niah_multiquery: four needles of distinct keys in random filler, all four keys queried."""

    num_needle_k: int = option(4, HELP_K, int_in_range(1))
    num_needle_q: int = option(4, HELP_Q, int_in_range(1))
    haystack: str = option("essay", HELP_HAYSTACK, haystack_kind)

    name = "ruler_niah_multiquery"
