"""RULER's common words extraction (cwe) on synthetic tokens: ``ruler_common_words`` (docs/ruler_suite.md).

Follows NVIDIA/RULER at commit c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a: the generator
scripts/data/synthetic/common_words_extraction.py (``get_example``: num_cw common words repeated freq_cw times
each and the other words freq_ucw times each, all distinct words, shuffled; the answer is the common words) and
the configuration ``cwe`` of scripts/synthetic.yaml (freq_cw 30, freq_ucw 3, num_cw 10). Scored as their
``string_match_all`` reads: every common word.

Grammar (the vocabulary is ruler_layout.py's):

    sequence := word{C} '?' ':' word{num_cw}          exactly `length` tokens, C = length - 2 - num_cw
    context  := num_cw common words freq_cw times each, U uncommon words freq_ucw times each (the last one
                fewer if C needs it), shuffled
    answer   := the common words, ascending by id (RULER's answer is a set: its metric ignores the order)

    w7 w3 w40 w3 w7 w9 w3 w7 w21 ? : w3 w7          (num_cw 2, freq_cw 3, freq_ucw 1)

The words of a sequence are distinct words of the vocabulary, so U grows with the length as in RULER (whose
longer lists take more distinct words): a length needs num_cw + U <= num_words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...utils.checks import int_in_range, option
from ..task import TaskBatch, register_task
from .ruler_layout import ANSWER, QUERY, WORD0, RulerTask, answer_mask, check_num, mean


@register_task
@dataclass(frozen=True)
class RulerCommonWords(RulerTask):
    """RULER cwe: a shuffled list where a few words repeat often and the rest rarely; the common ones answered."""

    num_cw: int = option(10, "common words, the answer (RULER's num_cw)", int_in_range(1))
    freq_cw: int = option(30, "occurrences of each common word (RULER's freq_cw)", int_in_range(2))
    freq_ucw: int = option(3, "occurrences of each uncommon word, below freq_cw (RULER's freq_ucw)", int_in_range(1))
    num_words: int = option(4096, "the word vocabulary (words w0...)", int_in_range(1))

    name = "ruler_common_words"

    def __post_init__(self):
        super().__post_init__()
        if self.freq_ucw >= self.freq_cw:
            raise ValueError(
                f"{self.name}: freq_ucw = {self.freq_ucw}; expected fewer than freq_cw = {self.freq_cw} occurrences "
                "(the common words must be the most frequent)"
            )
        if self.num_words <= self.num_cw:
            raise ValueError(
                f"{self.name}: num_words = {self.num_words}; expected more than num_cw = {self.num_cw} (the list "
                "holds the common words and at least one other)"
            )

    def context_tokens(self, length: int) -> int:
        return length - 2 - self.num_cw

    def uncommon_words(self, length: int) -> int:
        """U: the distinct uncommon words of a ``length``-token sequence."""
        rest = self.context_tokens(length) - self.num_cw * self.freq_cw
        return -(-rest // self.freq_ucw)

    def min_length(self) -> int:
        return self.num_cw * self.freq_cw + 1 + 2 + self.num_cw

    def max_length(self) -> int:
        """The longest length whose words the vocabulary holds (every word of a sequence distinct)."""
        return self.num_cw * self.freq_cw + (self.num_words - self.num_cw) * self.freq_ucw + 2 + self.num_cw

    def what_fits(self) -> str:
        return f"num_cw = {self.num_cw} words freq_cw = {self.freq_cw} times, one other word, '?', ':' and the answer"

    def length_problem(self, length: int) -> str | None:
        if length <= self.max_length():
            return None
        need = self.num_cw + self.uncommon_words(length)
        return (
            f"its list takes {need} distinct words; expected num_words >= {need} (it is {self.num_words}), or a "
            f"length <= {self.max_length()}"
        )

    def counts(self, length: int) -> torch.Tensor:
        """The occurrences of each word of a ``length``-token list: the common words, then the uncommon ones."""
        rest = self.context_tokens(length) - self.num_cw * self.freq_cw
        u = self.uncommon_words(length)
        counts = torch.full((self.num_cw + u,), self.freq_ucw)
        counts[: self.num_cw] = self.freq_cw
        counts[-1] = rest - (u - 1) * self.freq_ucw
        return counts

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same ones."""
        self.check_length(length)
        check_num(self.name, num)
        gen = torch.Generator().manual_seed(seed)
        counts = self.counts(length)
        slots = torch.arange(counts.numel()).repeat_interleave(counts)  # the word (index) of each list place
        words = torch.rand(num, self.num_words, generator=gen).argsort(dim=1, stable=True)[:, : counts.numel()]
        words = words + WORD0
        shuffle = torch.rand(num, slots.numel(), generator=gen).argsort(dim=1, stable=True)
        context = words.gather(1, slots[shuffle])
        answer = words[:, : self.num_cw].sort(dim=1).values
        marks = torch.tensor([QUERY, ANSWER]).expand(num, 2)
        tokens = torch.cat([context, marks, answer], dim=1)
        return TaskBatch(tokens, self.loss_mask(tokens))

    def solve(self, context: list[int], query: list[int]) -> list[int]:
        """The num_cw most frequent words, ascending; checks that they are more frequent than every other."""
        if query or not context or any(t < WORD0 for t in context):
            raise ValueError("expected only words before '?' and nothing between '?' and ':'")
        counts: dict[int, int] = {}
        for t in context:
            counts[t] = counts.get(t, 0) + 1
        ranked = sorted(counts, key=lambda word: -counts[word])
        top = ranked[: self.num_cw]
        if len(top) < self.num_cw or (len(ranked) > self.num_cw and counts[ranked[self.num_cw]] >= counts[top[-1]]):
            raise ValueError(f"expected {self.num_cw} words that each occur more often than every other word")
        return sorted(top)

    def statistics(self, batch: TaskBatch) -> dict:
        """The answer's length, the fewest occurrences of an answer word and the most of another word (the
        margin that makes the answer unambiguous), and the distinct words per list."""
        tokens = batch.tokens
        n, length = tokens.shape
        context = (tokens >= WORD0) & ~answer_mask(tokens)
        counts = torch.zeros(n, self.vocab_size, dtype=torch.long)
        counts.scatter_add_(1, torch.where(context, tokens, 0), context.long())
        answered = torch.zeros_like(counts, dtype=torch.bool)
        answered.scatter_(1, torch.where(answer_mask(tokens), tokens, 0), answer_mask(tokens))
        answered[:, 0] = False
        fewest = torch.where(answered, counts, torch.iinfo(torch.long).max).min(dim=1).values
        most_other = torch.where(answered, 0, counts).max(dim=1).values
        return {
            **self.base_statistics(batch),
            "min_answer_count": mean(fewest) if n else math.nan,
            "max_other_count": mean(most_other) if n else math.nan,
            "distinct_words": mean((counts > 0).sum(dim=1)),
        }
