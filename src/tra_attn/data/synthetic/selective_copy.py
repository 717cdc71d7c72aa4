"""Selective copying, generated procedurally.

Our own generator in the spirit of the selective copying task of the Mamba paper (Gu and Dao 2023,
arXiv 2312.00752): ``num_tokens`` data tokens lie scattered among noise tokens; after a copy marker the
model must reproduce the data tokens in order, skipping the noise. Only the reproduced tokens are scored.

Grammar (space-separated words in the text format; docs/suite_tasks.md has the details):

    sequence := '.'* span '.'* '>' data{N}     exactly `length` tokens, N = num_tokens
    span     := data ('.'* data){N-1}          starts and ends with a data token

The span holds round((N - 1) * p / (1 - p)) noise tokens ('.', p = noise_density) placed uniformly at
random among its N - 1 gaps: on average p / (1 - p) noise tokens between consecutive data tokens, the
mean gap when every token is noise with probability p. The span starts at a uniformly random offset
in the prefix, which is noise elsewhere. So a longer sequence copies the same number of tokens with
the same gaps, from up to proportionally further back behind proportionally more noise.

Token ids: noise '.'=0, marker '>'=1, data 'd0'... = 2... (data tokens uniform, repeats allowed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...utils.checks import in_range, int_in_range, is_int, option
from ..task import EvalSplit, Task, TaskBatch, register_task
from .density_splits import density_splits

NOISE, MARKER, DATA0 = 0, 1, 2


def copy_mask(tokens: torch.Tensor) -> torch.Tensor:
    """True at every token after the marker."""
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 1:] = (tokens == MARKER).cumsum(dim=1)[:, :-1] > 0
    return mask


@register_task
@dataclass(frozen=True)
class SelectiveCopy(Task):
    """Selective copying: data tokens scattered among noise, reproduced in order after a marker."""

    num_tokens: int = option(8, "data tokens to copy per sequence", int_in_range(1))
    num_symbols: int = option(8, "data vocabulary size (at least 2)", int_in_range(2))
    noise_density: float = option(
        0.8,
        "noise between data tokens: mean gap p / (1 - p) tokens, p in [0, 1)",
        in_range(0.0, 1.0, what="a fraction"),
    )

    name = "selective_copy"

    @property
    def vocab_size(self) -> int:
        return DATA0 + self.num_symbols

    def gap_noise(self) -> int:
        """Noise tokens between the first and the last data token, in all."""
        p = self.noise_density
        return math.floor((self.num_tokens - 1) * p / (1.0 - p) + 0.5)

    def min_length(self) -> int:
        return 2 * self.num_tokens + self.gap_noise() + 1

    def check_length(self, length) -> int:
        if not is_int(length) or length < self.min_length():
            raise ValueError(
                f"selective_copy: length = {length!r}; expected an integer >= {self.min_length()} (num_tokens = "
                f"{self.num_tokens} data tokens with {self.gap_noise()} noise tokens between them at "
                f"noise_density = {self.noise_density}, the marker and the copies)"
            )
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same sequences."""
        self.check_length(length)
        if not is_int(num) or num < 0:
            raise ValueError(f"selective_copy: num = {num!r}; expected a non-negative integer")
        gen = torch.Generator().manual_seed(seed)
        n = self.num_tokens
        prefix = length - 1 - n
        span = n + self.gap_noise()
        data = torch.randint(self.num_symbols, (num, n), generator=gen) + DATA0
        # Inside the span: data first and last, the other n - 2 at a uniformly random subset of the inner places.
        inner = torch.rand(num, max(span - 2, 0), generator=gen).argsort(dim=1, stable=True)[:, : max(n - 2, 0)] + 1
        offsets = torch.cat([torch.zeros(num, 1, dtype=torch.long), inner.sort(dim=1).values], dim=1)
        if n > 1:
            offsets = torch.cat([offsets, torch.full((num, 1), span - 1)], dim=1)
        start = torch.randint(prefix - span + 1, (num, 1), generator=gen)
        tokens = torch.full((num, length), NOISE)
        tokens.scatter_(1, start + offsets, data)
        tokens[:, prefix] = MARKER
        tokens[:, prefix + 1 :] = data
        return TaskBatch(tokens, copy_mask(tokens))

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """iid, sparse and dense at the training length, then iid at 2x, 4x and 8x; split k uses TEST_SEED + k."""
        return density_splits(self, "noise_density", train_length, sequences)

    def encode_text(self, line: str) -> torch.Tensor:
        """'. d3 . d1 > d3 d1' -> token ids, validating the grammar and that the copy matches the data."""
        text = line.strip()
        words = text.split()
        ids = [self._word_id(word, text) for word in words]
        if ids.count(MARKER) != 1:
            raise ValueError(f"selective_copy: malformed sequence {text[:40]!r}; expected exactly one marker '>'")
        cut = ids.index(MARKER)
        data = [t for t in ids[:cut] if t != NOISE]
        copy = ids[cut + 1 :]
        if NOISE in copy or copy != data:
            after = " ".join(words[cut + 1 :])[:40]
            raise ValueError(
                f"selective_copy: malformed sequence {text[:40]!r}: after '>' comes {after!r}; "
                f"expected the {len(data)} data tokens before it, in order"
            )
        return torch.tensor(ids)

    def decode_text(self, tokens: torch.Tensor) -> str:
        words = {NOISE: ".", MARKER: ">"}
        return " ".join(words.get(int(t), f"d{int(t) - DATA0}") for t in tokens)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        return copy_mask(tokens)

    def statistics(self, batch: TaskBatch) -> dict:
        """Copies per sequence, the data span and its gaps, the noise fraction, and copy distances."""
        tokens = batch.tokens
        n, length = tokens.shape
        scored = copy_mask(tokens)
        data = (tokens >= DATA0) & ~scored
        pos = torch.arange(length).expand(n, length)
        first = torch.where(data, pos, length).min(dim=1).values
        last = torch.where(data, pos, -1).max(dim=1).values
        count = data.sum(dim=1)
        span = (last - first + 1).clamp(min=0).double()
        # The i-th copy reproduces the i-th data token: its distance is the difference of their positions.
        aligned = bool((count == scored.sum(1)).all()) and n > 0
        distances = (pos[scored] - pos[data]).double() if aligned else torch.empty(0)
        return {
            "sequences": n,
            "length": length,
            "copies_per_sequence": scored.sum().item() / max(n, 1),
            "mean_span": span.mean().item() if n else math.nan,
            "mean_gap": ((span - count).sum() / (count - 1).clamp(min=0).sum()).item() if n else math.nan,
            "noise_fraction": (tokens == NOISE).double().mean().item() if n else math.nan,
            "mean_copy_distance": distances.mean().item() if distances.numel() else math.nan,
            "max_copy_distance": distances.max().item() if distances.numel() else math.nan,
        }

    def _word_id(self, word: str, text: str) -> int:
        if word in (".", ">"):
            return NOISE if word == "." else MARKER
        number = word[1:]
        if word[:1] != "d" or not (number.isascii() and number.isdigit()) or str(int(number)) != number:
            number = None
        if number is None or int(number) >= self.num_symbols:
            raise ValueError(
                f"selective_copy: malformed sequence {text[:40]!r}: unknown token {word!r}; expected '.', '>' "
                f"or d0..d{self.num_symbols - 1}"
            )
        return DATA0 + int(number)
