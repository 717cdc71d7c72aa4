"""The ASEntmax suite's n-back task: at every token, output the token ``num_steps`` before it
(docs/asentmax_suite.md).

Follows deep-spin/asentmax at commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d: the generator ``NBack`` of
scripts/generate_data.py (README "2Back": ``--task_type nback --vocab_size 16 --seq_len 48 --vary_len 16
--num_steps 2``) and the data config synthetic/configs/data/nback.yaml (folder ``nback/n2_v16_tr-32-64_t-64-4096``:
training seq_len in [32, 64], tests 64..4096; ``SimpleTokenizer(max_vocab_id=15)``; TokenClassificationProcessor
with ``input_pattern: "{bos_token} {text} {eos_token}"``, ``target_pattern: "{no_loss} {text} {no_loss}"``). Their
source is a 0 then seq_len tokens uniform in 1..vocab_size-1; the label of source position j is the source
token num_steps before it, 0 for the first num_steps positions; every label is scored.

Their model classifies every input position (a label per token, from the prefix up to it). A language model
predicts the next token, so here each label follows its input token as a token of its own (label ids above the
tokenizer's, text ``y<value>``): the prediction at input token j is its label, as theirs. The labels a later
position sees are earlier source tokens, so they give nothing away (the label of j is source j - num_steps,
which no earlier label holds). Not in their code: which metric they report for this task (no experiment config
uses nback); ours are the library's, full-sequence and per-token accuracy over the labels. Their trailing
<eos> is an input that no scored position can see (causal attention): we leave it out.

Grammar (ids: data 0..num_symbols-1, pad, bos, eos, mask, sep, then labels y0..y<num_symbols-1>):

    sequence := <bos> (s_j y_j){m + 1}       exactly `length` = 2 m + 3 tokens, m = the authors' seq_len
    s_0 = 0, s_j uniform in 1..num_symbols-1 (j >= 1); y_j = s_{j - num_steps} (0 for j < num_steps)

    <bos> 0 y0 7 y0 3 y0 12 y7 5 y3
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
)


@register_task
@dataclass(frozen=True)
class AsentmaxNBack(AuthorsTests, Task):
    """ASEntmax n-back: every token labelled with the token num_steps before it (the authors' generator)."""

    num_symbols: int = option(16, "source tokens 0..num_symbols-1 (the authors' --vocab_size)", int_in_range(2))
    num_steps: int = option(2, "how far back the label looks (the authors' --num_steps)", int_in_range(1))
    longest_test: int = option(4096, "the longest test seq_len (tests at 64, 128, ... up to it)", longest_test_check)

    name = "asentmax_nback"
    authors_train_seq_len: ClassVar[tuple[int, int]] = (32, 64)

    def __post_init__(self):
        super().__post_init__()
        if self.num_steps >= self.authors_train_seq_len[0]:
            raise ValueError(
                f"{self.name}: num_steps = {self.num_steps}; expected fewer than the shortest training seq_len "
                f"{self.authors_train_seq_len[0]} (generate_data.py's check)"
            )

    @property
    def specials(self) -> Specials:
        return Specials(self.num_symbols - 1)

    @property
    def label0(self) -> int:
        return self.specials.end

    @property
    def vocab_size(self) -> int:
        return self.label0 + self.num_symbols

    def length_of(self, seq_len: int) -> int:
        return 2 * seq_len + 3

    def seq_len_of(self, length: int) -> int:
        return (length - 3) // 2

    def check_length(self, length) -> int:
        low = self.length_of(self.num_steps + 1)
        if not is_int(length) or length < low or length % 2 == 0:
            raise ValueError(
                f"{self.name}: length = {length!r}; expected 2 m + 3 tokens (<bos> and m + 1 source tokens, each "
                f"followed by its label) for a seq_len m > num_steps = {self.num_steps}: an odd integer >= {low}, "
                f"e.g. 131 for the authors' m = 64"
            )
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same sequences."""
        self.check_length(length)
        check_num(self.name, num)
        gen = torch.Generator().manual_seed(seed)
        m = self.seq_len_of(length)
        source = torch.cat(
            [torch.zeros(num, 1, dtype=torch.long), torch.randint(1, self.num_symbols, (num, m), generator=gen)], 1
        )
        tokens = torch.full((num, length), self.specials.bos)
        tokens[:, 1::2] = source
        tokens[:, 2::2] = self.labels(source) + self.label0
        return TaskBatch(tokens, self.loss_mask(tokens))

    def labels(self, source: torch.Tensor) -> torch.Tensor:
        """(N, m + 1) -> (N, m + 1): the source rolled num_steps right, 0 in front (the authors' np.roll)."""
        out = torch.zeros_like(source)
        out[:, self.num_steps :] = source[:, : source.shape[1] - self.num_steps]
        return out

    def encode_text(self, line: str) -> torch.Tensor:
        """'<bos> 0 y0 7 y0 3 y0 12 y7' -> token ids, validating the grammar and every label."""
        ids = encode_words(self.name, line, self.specials, self.num_symbols, self.num_symbols, self.label0)
        tokens = torch.tensor(ids)
        source, labels = tokens[1::2], tokens[2::2]
        shape = len(ids) % 2 == 1 and ids[0] == self.specials.bos and len(ids) >= self.length_of(self.num_steps + 1)
        shape = shape and bool((source < self.num_symbols).all() and (labels >= self.label0).all())
        if not shape or source[0] != 0 or (source[1:] == 0).any():
            raise malformed(
                self.name,
                line,
                f"expected <bos> then (source token, label) pairs: a first source token 0, then source tokens in "
                f"1..{self.num_symbols - 1}, each followed by its label y<k>, more than num_steps = {self.num_steps}",
            )
        expected = self.labels(source[None])[0]
        wrong = (labels - self.label0 != expected).nonzero()
        if wrong.numel():
            j = int(wrong[0])
            got, want = int(labels[j]) - self.label0, int(expected[j])
            raise malformed(
                self.name, line, f"the label of source token {j} is y{got}; expected y{want}, the token num_steps = "
                f"{self.num_steps} before it"
            )  # fmt: skip
        return tokens

    def decode_text(self, tokens: torch.Tensor) -> str:
        return decode_words(tokens, self.specials, self.label0)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """True at every label."""
        return tokens >= self.label0

    def statistics(self, batch: TaskBatch) -> dict:
        """The authors' seq_len, labels per sequence, and the fraction of labels that repeat their input token."""
        tokens = batch.tokens
        num, length = tokens.shape
        source, labels = tokens[:, 1::2], tokens[:, 2::2] - self.label0
        return {
            "sequences": num,
            "length": length,
            "seq_len": self.seq_len_of(length),
            "scored_per_sequence": batch.loss_mask.sum().item() / max(num, 1),
            "label_equals_input": (source == labels).double().mean().item() if num else float("nan"),
        }
