"""The ASEntmax suite's local count task: how many times the current token has repeated so far
(docs/asentmax_suite.md).

Follows deep-spin/asentmax at commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d: the generator ``LocalCount`` of
scripts/generate_data.py (README "LocalCount": ``--task_type count --seq_len 96 --vary_len 32 --vocab_size 16
--max_reps 48``) and the data config synthetic/configs/data/local_count.yaml (folder
``local_count/10M-tr-64-128_V-16_reps-48``: training seq_len in [64, 128]; ``SimpleTokenizer(max_vocab_id=15)``;
TokenClassificationProcessor, input ``{bos_token} {text} {eos_token}``, labels ``{no_loss} {text} {no_loss}``).
Their source is blocks of one token repeated 2..max_reps times (uniform), no two neighbouring blocks equal, the
tokens uniform in 0..vocab_size-1; the label of a token is its 0-based index in its block (0, 1, 2, ...).

What we change, and why. Their model labels every position. A language model predicts the next token, and a
label placed after every token would show the next position the previous count, making the task a local rule
(count = previous count + 1 or 0). So here a sequence asks for one count, at its end, where no label is
visible: the source, then <sep> (their tokenizer's), then the label of the last source token (label ids above
the tokenizer's, text ``y<count>``). This is their function of the prefix (a causal model's label at position j
depends on the tokens up to j) evaluated at one position per sequence instead of all. The source has exactly n
tokens: blocks of lengths uniform in 2..max_reps until n is filled, the last one cut where n ends, so the asked
position is anywhere in its block. Theirs draws ``seq_len // ((max_reps + 2) / 2)`` whole blocks, so its length
varies around seq_len. Their neighbouring blocks differ by redrawing equal neighbours until none are left; ours
draw each block uniformly among the symbols other than the previous block's. Not in their code: the metric (no
experiment config uses local_count) and the test range (the folder names none; we take the generator's default
64..4096).

Grammar (ids: data 0..num_symbols-1, pad, bos, eos, mask, sep, then labels y0..y<max_reps-1>):

    sequence := <bos> block+ <sep> y<c>      exactly `length` = n + 3 tokens, n = the source tokens
    block    := a token repeated r times, r uniform in 2..max_reps (the last block cut at n), neighbours differ
    c        := the repeats of the last source token before it (0-based)

    <bos> 3 3 3 9 9 0 0 0 <sep> y2
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ...utils.checks import is_int
from ..task import Task, TaskBatch, register_task
from .asentmax_layout import (
    AuthorsTests,
    Specials,
    check_int,
    check_longest,
    check_num,
    decode_words,
    encode_words,
    malformed,
    mean,
)


def run_counts(source: torch.Tensor) -> torch.Tensor:
    """(N, n) -> (N, n): each token's 0-based index in its run of equal tokens."""
    n = source.shape[1]
    pos = torch.arange(n).expand_as(source)
    starts = torch.ones_like(source, dtype=torch.bool)
    starts[:, 1:] = source[:, 1:] != source[:, :-1]
    return pos - torch.where(starts, pos, 0).cummax(dim=1).values


@register_task
@dataclass(frozen=True)
class AsentmaxLocalCount(AuthorsTests, Task):
    """ASEntmax local count: blocks of repeated tokens, then the 0-based count of the last token's repeats."""

    num_symbols: int = field(
        default=16, metadata={"help": "source tokens 0..num_symbols-1 (the authors' --vocab_size)"}
    )
    max_reps: int = field(default=48, metadata={"help": "the longest block (the authors' --max_reps, at least 2)"})
    longest_test: int = field(
        default=4096, metadata={"help": "the longest test seq_len n (tests at n = 64, 128, ... up to it)"}
    )

    name = "asentmax_local_count"
    authors_train_seq_len: ClassVar[tuple[int, int]] = (64, 128)  # --seq_len 96 --vary_len 32

    def __post_init__(self):
        check_int(self.name, "num_symbols", self.num_symbols, 2)
        check_int(self.name, "max_reps", self.max_reps, 2)
        check_longest(self.name, self.longest_test)

    @property
    def specials(self) -> Specials:
        return Specials(self.num_symbols - 1)

    @property
    def label0(self) -> int:
        return self.specials.end

    @property
    def vocab_size(self) -> int:
        return self.label0 + self.max_reps

    def length_of(self, seq_len: int) -> int:
        return seq_len + 3

    def seq_len_of(self, length: int) -> int:
        return length - 3

    def check_length(self, length) -> int:
        if not is_int(length) or length < 4:
            raise ValueError(
                f"{self.name}: length = {length!r}; expected n + 3 tokens (<bos>, n >= 1 source tokens, <sep>, the "
                f"count): an integer >= 4, e.g. 131 for n = 128"
            )
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same sequences."""
        self.check_length(length)
        check_num(self.name, num)
        gen = torch.Generator().manual_seed(seed)
        n, sp = self.seq_len_of(length), self.specials
        blocks = (n + 1) // 2  # enough blocks of at least 2 tokens to fill n
        reps = torch.randint(2, self.max_reps + 1, (num, blocks), generator=gen)
        symbols = torch.randint(1, self.num_symbols, (num, blocks), generator=gen)  # steps to a different symbol
        symbols[:, 0] = torch.randint(self.num_symbols, (num,), generator=gen)
        symbols = symbols.cumsum(dim=1) % self.num_symbols
        ends = reps.cumsum(dim=1)
        block_of = torch.searchsorted(ends, torch.arange(n).expand(num, n).contiguous(), right=True)
        source = symbols.gather(1, block_of)
        count = run_counts(source)[:, -1:] if n else torch.zeros(num, 1, dtype=torch.long)
        column = torch.zeros(num, 1, dtype=torch.long)
        tokens = torch.cat([column + sp.bos, source, column + sp.sep, count + self.label0], dim=1)
        return TaskBatch(tokens, self.loss_mask(tokens))

    def encode_text(self, line: str) -> torch.Tensor:
        """'<bos> 3 3 9 9 9 <sep> y2' -> token ids, validating the grammar and the count."""
        sp = self.specials
        ids = encode_words(self.name, line, sp, self.num_symbols, self.max_reps, self.label0)
        source = torch.tensor([ids[1:-2]])
        shape = len(ids) >= 4 and ids[0] == sp.bos and ids[-2] == sp.sep and ids[-1] >= self.label0
        if not shape or not bool((source < self.num_symbols).all()):
            raise malformed(self.name, line, "expected <bos>, source tokens, <sep> and the count y<k>")
        runs = run_counts(source)[0]
        if int(runs.max()) >= self.max_reps:
            raise malformed(self.name, line, f"a block is longer than max_reps = {self.max_reps}")
        if ids[-1] - self.label0 != int(runs[-1]):
            raise malformed(
                self.name, line, f"the count is y{ids[-1] - self.label0}; expected y{int(runs[-1])}, the 0-based "
                "repeats of the last source token"
            )  # fmt: skip
        return torch.tensor(ids)

    def decode_text(self, tokens: torch.Tensor) -> str:
        return decode_words(tokens, self.specials, self.label0)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """True at the count (every label)."""
        return tokens >= self.label0

    def statistics(self, batch: TaskBatch) -> dict:
        """Source tokens n, blocks per sequence, the mean block and the mean asked count."""
        tokens = batch.tokens
        num, length = tokens.shape
        source = tokens[:, 1:-2]
        starts = torch.ones_like(source, dtype=torch.bool)
        starts[:, 1:] = source[:, 1:] != source[:, :-1]
        blocks = starts.sum(1).double()
        return {
            "sequences": num,
            "length": length,
            "seq_len": self.seq_len_of(length),
            "blocks_per_sequence": mean(blocks),
            "mean_block": (source.shape[1] / blocks).mean().item() if num else float("nan"),
            "mean_count": mean(tokens[:, -1] - self.label0),
        }
