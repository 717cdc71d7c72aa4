"""RULER's frequent words extraction (fwe) on synthetic tokens: ``ruler_frequent_words`` (docs/ruler_suite.md).

Follows NVIDIA/RULER at commit c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a: the generator
scripts/data/synthetic/freq_words_extraction.py (``generate_input_output``: a vocabulary in random rank order whose
top-ranked word is the noise '...'; the word of rank k occurs floor(N k^-alpha / zeta(alpha)) times, N the largest
that fits the length; the words shuffled; the answer is the words of ranks 2, 3 and 4, ``vocab[1:4]``) and the
configuration ``fwe`` of scripts/synthetic.yaml (alpha 2.0). Scored as their ``string_match_all`` reads: each of
the three words.

Grammar (the vocabulary is ruler_layout.py's):

    sequence := context '?' ':' word{num_top}        exactly `length` tokens, C = length - 2 - num_top
    context  := the noise word '.' and the words, rank k occurring floor(N k^-alpha / zeta(alpha)) times (rank 1:
                '.', ranks 2...: the num_words words in a random order), shuffled; the C - (their sum) tokens the
                largest such N leaves are '.' too
    answer   := the words of ranks 2 .. num_top + 1, most frequent first

    . w5 . . w12 . w5 . w9 . . w5 w12 . . ? : w5 w12 w9

A length is valid when its N makes the answer unambiguous in the way real numbers would: N (w_k - w_{k+1}) >= 1
for each answer rank k and the rank after the answer (w_k = k^-alpha / zeta(alpha)), so each answer word occurs
more often than the next (at alpha = 2 and num_top = 3: lengths from 68 tokens).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from ...utils.checks import in_range, int_in_range, option
from ..task import TaskBatch, register_task
from .ruler_layout import ANSWER, NOISE, QUERY, WORD0, RulerTask, answer_mask, check_num, mean


def zeta(alpha: float, terms: int = 64) -> float:
    """The Riemann zeta function at ``alpha`` > 1 (Euler-Maclaurin after ``terms`` terms; scipy.special.zeta)."""
    m = float(terms)
    head = math.fsum(k**-alpha for k in range(1, terms))
    tail = m ** (1 - alpha) / (alpha - 1) + m**-alpha / 2 + alpha * m ** (-alpha - 1) / 12
    return head + tail - alpha * (alpha + 1) * (alpha + 2) * m ** (-alpha - 3) / 720


@functools.lru_cache(maxsize=64)
def weights(alpha: float, ranks: int) -> tuple[float, ...]:
    """w_k = k^-alpha / zeta(alpha) for k = 1 .. ranks."""
    z = zeta(alpha)
    return tuple(k**-alpha / z for k in range(1, ranks + 1))


def zipf_counts(alpha: float, ranks: int, n: int) -> list[int]:
    """RULER's occurrences per rank: floor(n w_k)."""
    return [math.floor(n * w) for w in weights(alpha, ranks)]


@functools.lru_cache(maxsize=4096)
def fitting_n(alpha: float, ranks: int, context: int) -> int:
    """The largest N whose counts add up to at most ``context`` tokens (they never fall as N grows)."""
    low, high = 0, math.ceil((context + 1) * zeta(alpha)) + 1  # rank 1 alone exceeds context at high
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if sum(zipf_counts(alpha, ranks, middle)) <= context else (low, middle - 1)
    return low


@register_task
@dataclass(frozen=True)
class RulerFrequentWords(RulerTask):
    """RULER fwe: Zipf-distributed words with a noise word on top; the next most frequent words answered."""

    alpha: float = option(
        2.0,
        "the Zipf (zeta) exponent, above 1 (RULER's alpha)",
        in_range(1.0, 16.0, high_allowed=True, note=" (zeta diverges at 1)", low_allowed=False),
    )
    num_top: int = option(3, "words answered, most frequent first (RULER's 3)", int_in_range(1))
    num_words: int = option(128, "the word vocabulary (words w0...), ranks 2 onwards", int_in_range(1))

    name = "ruler_frequent_words"

    def __post_init__(self):
        super().__post_init__()
        if self.num_words < self.num_top:
            raise ValueError(
                f"{self.name}: num_words = {self.num_words}; expected at least num_top = {self.num_top} words"
            )

    @property
    def ranks(self) -> int:
        return self.num_words + 1  # the noise word, then the words

    def needed_n(self) -> int:
        """The least N at which each answer rank outnumbers the next by at least one occurrence."""
        w = [*weights(float(self.alpha), self.ranks), 0.0]
        gaps = [w[k] - w[k + 1] for k in range(1, self.num_top + 1)]  # ranks 2 .. num_top + 1 and their next
        return math.ceil(1.0 / min(gaps) * (1 + 1e-9))

    def context_tokens(self, length: int) -> int:
        return length - 2 - self.num_top

    def counts(self, length: int) -> list[int]:
        """Occurrences per rank in a ``length``-token context (rank 1, the noise, fills what the others leave)."""
        context = self.context_tokens(length)
        counts = zipf_counts(float(self.alpha), self.ranks, fitting_n(float(self.alpha), self.ranks, context))
        counts[0] += context - sum(counts)
        while counts[-1] == 0:
            counts.pop()
        return counts

    def min_length(self) -> int:
        return sum(zipf_counts(float(self.alpha), self.ranks, self.needed_n())) + 2 + self.num_top

    def what_fits(self) -> str:
        return f"Zipf counts at alpha = {self.alpha} that rank the {self.num_top} answer words strictly, '?', ':'"

    def length_problem(self, length: int) -> str | None:
        counts = [*self.counts(length), *[0] * (self.num_top + 2)]
        top = counts[1 : self.num_top + 2]
        if all(a > b for a, b in zip(top, top[1:])):
            return None
        return f"the counts of ranks 2..{self.num_top + 2} are {top}; expected them strictly falling"

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same ones."""
        self.check_length(length)
        check_num(self.name, num)
        gen = torch.Generator().manual_seed(seed)
        counts = torch.tensor(self.counts(length))
        slots = torch.arange(counts.numel()).repeat_interleave(counts)  # the rank (0: noise) of each place
        words = torch.rand(num, self.num_words, generator=gen).argsort(dim=1, stable=True)[:, : counts.numel() - 1]
        by_rank = torch.cat([torch.full((num, 1), NOISE), words + WORD0], dim=1)
        shuffle = torch.rand(num, slots.numel(), generator=gen).argsort(dim=1, stable=True)
        context = by_rank.gather(1, slots[shuffle])
        marks = torch.tensor([QUERY, ANSWER]).expand(num, 2)
        tokens = torch.cat([context, marks, by_rank[:, 1 : self.num_top + 1]], dim=1)
        return TaskBatch(tokens, self.loss_mask(tokens))

    def solve(self, context: list[int], query: list[int]) -> list[int]:
        """The num_top most frequent words (the noise word aside), most frequent first; checks they are ranked
        strictly, and the last above every other word."""
        if query or any(t < WORD0 and t != NOISE for t in context):
            raise ValueError("expected only words and the noise word '.' before '?', and nothing between '?' and ':'")
        counts: dict[int, int] = {}
        for t in context:
            if t != NOISE:
                counts[t] = counts.get(t, 0) + 1
        ranked = sorted(counts, key=lambda word: -counts[word])
        numbers = [counts[word] for word in ranked[: self.num_top + 1]] + [0]
        if len(ranked) < self.num_top or not all(a > b for a, b in zip(numbers, numbers[1 : self.num_top + 1])):
            raise ValueError(f"expected {self.num_top} words each more frequent than the next (the noise '.' aside)")
        return ranked[: self.num_top]

    def statistics(self, batch: TaskBatch) -> dict:
        """The answer's length, the smallest gap in occurrences between consecutive answer words and between the
        last and the most frequent other word (>= 1: unambiguous), the top answer word's count, the noise fraction."""
        tokens = batch.tokens
        n, length = tokens.shape
        scored = answer_mask(tokens)
        context = (tokens >= WORD0) & ~scored
        counts = torch.zeros(n, self.vocab_size, dtype=torch.long)
        counts.scatter_add_(1, torch.where(context, tokens, 0), context.long())
        answer = tokens[scored].view(n, -1) if n else torch.zeros(0, self.num_top, dtype=torch.long)
        answered = counts.gather(1, answer)
        others = counts.scatter(1, answer, 0).max(dim=1, keepdim=True).values
        gaps = torch.cat([answered[:, :-1] - answered[:, 1:], answered[:, -1:] - others], dim=1)
        return {
            **self.base_statistics(batch),
            "min_count_gap": gaps.min().item() if n else math.nan,
            "top_answer_count": mean(answered[:, 0]) if n else math.nan,
            "noise_fraction": mean(((tokens == NOISE) & ~scored).double()),
        }
