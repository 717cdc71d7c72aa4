"""The source-target layout of the ASEntmax suite's copy, reverse and sort tasks (docs/asentmax_suite.md).

Following deep-spin/asentmax at commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d:
synthetic/configs/data/{copy,reverse,sort}.yaml give ``src_pattern: "{bos_token} {text} {sep_token}"``,
``trg_pattern: "{text} {eos_token}"`` and ``SimpleTokenizer(max_vocab_id=31)``; SourceTargetProcessor
(synthetic/src/data/data_processor.py) concatenates source and target ids, and with ``loss_type: target``
(configs/experiment/entmax/*.yaml) the loss covers exactly the target tokens and the eos. Their metric,
TextExactMatch (synthetic/src/metrics/exact_match.py), compares the greedy generation up to the first eos
(SrcTrgLitModule.post_process_preds, synthetic/src/models/src_trg_module.py) with the target text. With
greedy decoding that is exact match iff every target token and the eos are the argmax given the true prefix:
the library's ``full_seq_acc`` over the loss mask below is their ``acc``.

Grammar (ids: data 0..num_symbols-1, then pad, bos, eos, mask, sep):

    sequence := <bos> source <sep> target <eos>      exactly `length` = 2 n + 3 tokens
    source   := n data tokens, uniform and independent (scripts/generate_data.py: np.random.randint)
    target   := f(source), n tokens: the source (copy), reversed (reverse), sorted ascending (sort)

The authors' seq_len is n: training n uniform in [32, 64] (``--seq_len 48 --vary_len 16``), tests n = 64, 128, ...
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ...utils.checks import int_in_range, is_int
from ..task import Task, TaskBatch
from .asentmax_layout import (
    AuthorsTests,
    Specials,
    after_first,
    check_num,
    decode_words,
    encode_words,
    malformed,
)

num_symbols_check = int_in_range(2)  # generate_data.py: vocab_size >= 2


class SourceTarget(AuthorsTests, Task):
    """A source of n uniform data tokens, then its image under ``target`` (subclasses: frozen dataclasses with the
    fields ``num_symbols``, checked by ``num_symbols_check``, and ``longest_test``)."""

    authors_train_seq_len: ClassVar[tuple[int, int]] = (32, 64)  # --seq_len 48 --vary_len 16
    what: ClassVar[str] = ""  # the target, in words, for messages

    num_symbols: int
    longest_test: int

    def target(self, source: torch.Tensor) -> torch.Tensor:
        """(N, n) -> (N, n): the target of every source row."""
        raise NotImplementedError

    @property
    def specials(self) -> Specials:
        return Specials(self.num_symbols - 1)

    @property
    def vocab_size(self) -> int:
        return self.specials.end

    def length_of(self, seq_len: int) -> int:
        return 2 * seq_len + 3

    def seq_len_of(self, length: int) -> int:
        return (length - 3) // 2

    def check_length(self, length) -> int:
        if not is_int(length) or length < 5 or length % 2 == 0:
            raise ValueError(
                f"{self.name}: length = {length!r}; expected 2 n + 3 tokens for n >= 1 source tokens (<bos>, the "
                f"source, <sep>, the target, <eos>): an odd integer >= 5, e.g. 131 for the authors' n = 64"
            )
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same sequences."""
        self.check_length(length)
        check_num(self.name, num)
        gen = torch.Generator().manual_seed(seed)
        n, sp = self.seq_len_of(length), self.specials
        source = torch.randint(self.num_symbols, (num, n), generator=gen)
        column = torch.full((num, 1), 0, dtype=torch.long)
        tokens = torch.cat([column + sp.bos, source, column + sp.sep, self.target(source), column + sp.eos], dim=1)
        return TaskBatch(tokens, self.loss_mask(tokens))

    def encode_text(self, line: str) -> torch.Tensor:
        """'<bos> 3 1 <sep> 3 1 <eos>' -> token ids, validating the grammar and that the target is the source's."""
        sp = self.specials
        ids = encode_words(self.name, line, sp, self.num_symbols)
        n = (len(ids) - 3) // 2
        shape = len(ids) >= 5 and len(ids) % 2 == 1 and ids[0] == sp.bos and ids[n + 1] == sp.sep
        shape = shape and ids[-1] == sp.eos and all(t < self.num_symbols for t in ids[1 : n + 1] + ids[n + 2 : -1])
        if not shape:
            raise malformed(
                self.name, line, "expected <bos>, n data tokens, <sep>, n data tokens, <eos> (2 n + 3 tokens)"
            )
        source, target = torch.tensor([ids[1 : n + 1]]), ids[n + 2 : -1]
        if self.target(source)[0].tolist() != target:
            raise malformed(self.name, line, f"the target is not {self.what}")
        return torch.tensor(ids)

    def decode_text(self, tokens: torch.Tensor) -> str:
        return decode_words(tokens, self.specials)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """True at the target and the <eos>: every token after the <sep>."""
        return after_first(tokens, self.specials.sep)

    def statistics(self, batch: TaskBatch) -> dict:
        """The authors' seq_len n, scored tokens per sequence, and the source's distinct symbols."""
        tokens = batch.tokens
        num, length = tokens.shape
        n = self.seq_len_of(length)
        source = tokens[:, 1 : n + 1]
        present = torch.zeros(num, self.vocab_size, dtype=torch.bool).scatter_(1, source, True)
        return {
            "sequences": num,
            "length": length,
            "seq_len": n,
            "scored_per_sequence": batch.loss_mask.sum().item() / max(num, 1),
            "distinct_symbols": present.sum(1).double().mean().item() if num else float("nan"),
        }
