"""The ASEntmax suite's local count task: how many times the current token has repeated so far
(docs/asentmax_suite.md).

Follows deep-spin/asentmax at commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d: the generator ``LocalCount`` of
scripts/generate_data.py (README "LocalCount": ``--task_type count --seq_len 96 --vary_len 32 --vocab_size 16
--max_reps 48``) and the data config synthetic/configs/data/local_count.yaml (folder
``local_count/10M-tr-64-128_V-16_reps-48``: training seq_len in [64, 128]; ``SimpleTokenizer(max_vocab_id=15)``;
TokenClassificationProcessor, input ``{bos_token} {text} {eos_token}``, labels ``{no_loss} {text} {no_loss}``).
Their source is blocks of one token repeated 2..max_reps times (uniform), no two neighbouring blocks equal, the
tokens uniform in 0..vocab_size-1; the label of a token is its 0-based index in its block (0, 1, 2, ...).

Their model labels every position, and so does ours: the labels are targets the model never reads
(``TaskBatch.targets``), so no position sees an earlier count. The row is their input ``<bos> source <eos>``; the
prediction at source token j is scored against its count, as their classifier's at j is (``targets[:, j + 1]``
holds it, the next-token convention of the library, with ids above the tokenizer's, text ``y<count>``). Every
count is scored, and a sequence is right when all of them are.

What differs. Ours has exactly n source tokens: blocks of lengths uniform in 2..max_reps until n is filled, the last
one cut where n ends. Theirs draws ``seq_len // ((max_reps + 2) / 2)`` whole blocks for the seq_len s it draws in
64..128, so a training sample holds 4 to 240 tokens (mean 83; 33 to 139 in 90% of them) where ours hold 64 to 128,
and a test sample at s varies around s (at s = 512, 401 to 600 in 90%). Their neighbouring blocks differ by
redrawing equal neighbours until none are left; ours draw each block uniformly among the symbols other than the
previous block's. Not in their code: the metric (no experiment config uses local_count) and the test range (the
folder names none; we take the generator's default 64..4096).

Grammar (ids: data 0..num_symbols-1, pad, bos, eos, mask, sep, then labels y0..y<max_reps-1>); the text form
writes the counts after the sequence:

    sequence := <bos> block+ <eos>    exactly `length` = n + 2 tokens, n = the source tokens
    block    := a token repeated r times, r uniform in 2..max_reps (the last block cut at n), neighbours differ
    counts   := y<c> per source token, c its 0-based index in its block

    <bos> 3 3 3 9 9 0 <eos> y0 y1 y2 y0 y1 y0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...utils.checks import int_in_range, is_int, option
from ..task import Task, TaskBatch, register_task
from .asentmax_layout import (
    AuthorsTests,
    Specials,
    check_num,
    decode_words,
    encode_words,
    longest_test_check,
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
    """ASEntmax local count: blocks of repeated tokens, each token labelled with its 0-based index in its block."""

    num_symbols: int = option(16, "source tokens 0..num_symbols-1 (the authors' --vocab_size)", int_in_range(2))
    max_reps: int = option(48, "the longest block (the authors' --max_reps, at least 2)", int_in_range(2))
    longest_test: int = option(
        4096, "the longest test seq_len n (tests at n = 64, 128, ... up to it)", longest_test_check
    )

    name = "asentmax_local_count"
    authors_train_seq_len: ClassVar[tuple[int, int]] = (64, 128)  # --seq_len 96 --vary_len 32

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
        return seq_len + 2

    def seq_len_of(self, length: int) -> int:
        return length - 2

    def check_length(self, length) -> int:
        if not is_int(length) or length < 3:
            raise ValueError(
                f"{self.name}: length = {length!r}; expected n + 2 tokens (<bos>, n >= 1 source tokens, <eos>): an "
                f"integer >= 3, e.g. 130 for n = 128"
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
        column = torch.zeros(num, 1, dtype=torch.long)
        tokens = torch.cat([column + sp.bos, symbols.gather(1, block_of), column + sp.eos], dim=1)
        return self.batch_of(tokens)

    def batch_of(self, tokens: torch.Tensor) -> TaskBatch:
        """The sequences with their counts as targets: the count of the source token at j in ``targets[:, j + 1]``."""
        targets = torch.full_like(tokens, self.specials.pad)
        targets[:, 2:] = run_counts(tokens[:, 1:-1]) + self.label0
        return TaskBatch(tokens, self.loss_mask(tokens), targets=targets)

    def encode_text(self, line: str) -> torch.Tensor:
        """'<bos> 3 3 9 <eos> y0 y1 y0' -> the sequence's ids, validating the grammar and the counts."""
        sp = self.specials
        ids = encode_words(self.name, line, sp, self.num_symbols, self.max_reps, self.label0)
        end = ids.index(sp.eos) if sp.eos in ids else len(ids)
        tokens, counts = ids[: end + 1], [i - self.label0 for i in ids[end + 1 :]]
        source = torch.tensor([tokens[1:-1]])
        shape = len(tokens) >= 3 and tokens[0] == sp.bos and tokens[-1] == sp.eos and min(counts, default=0) >= 0
        if not shape or not bool((source < self.num_symbols).all()):
            raise malformed(self.name, line, "expected <bos>, source tokens, <eos> and a count y<k> per source token")
        runs = run_counts(source)[0]
        if int(runs.max()) >= self.max_reps:
            raise malformed(self.name, line, f"a block is longer than max_reps = {self.max_reps}")
        if counts != runs.tolist():
            raise malformed(
                self.name, line, f"the counts are {' '.join(f'y{c}' for c in counts)}; expected "
                f"{' '.join(f'y{c}' for c in runs.tolist())}, each source token's 0-based index in its block"
            )  # fmt: skip
        return torch.tensor(tokens)

    def decode_text(self, tokens: torch.Tensor) -> str:
        """The sequence, then the count of each source token."""
        counts = " ".join(f"y{c}" for c in run_counts(tokens[None, 1:-1])[0].tolist())
        return f"{decode_words(tokens, self.specials)} {counts}"

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """True at every count: position j + 1 of each source token j (all but <bos> and the one after it)."""
        mask = torch.zeros_like(tokens, dtype=torch.bool)
        mask[:, 2:] = True
        return mask

    def statistics(self, batch: TaskBatch) -> dict:
        """Source tokens n, blocks per sequence, the mean block and the mean count."""
        tokens = batch.tokens
        num, length = tokens.shape
        source = tokens[:, 1:-1]
        starts = torch.ones_like(source, dtype=torch.bool)
        starts[:, 1:] = source[:, 1:] != source[:, :-1]
        blocks = starts.sum(1).double()
        return {
            "sequences": num,
            "length": length,
            "seq_len": self.seq_len_of(length),
            "blocks_per_sequence": mean(blocks),
            "mean_block": (source.shape[1] / blocks).mean().item() if num else float("nan"),
            "mean_count": mean(run_counts(source)),
        }
