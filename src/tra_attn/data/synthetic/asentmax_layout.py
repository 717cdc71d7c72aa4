"""What the ASEntmax suite's tasks share (the ``asentmax_*`` tasks; docs/asentmax_suite.md): the authors'
token ids, the text form, the test splits at the authors' lengths, and how their training range maps onto
``TrainConfig.length`` and ``TrainConfig.length_spread``.

The authors' code: deep-spin/asentmax at commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d. Their tokenizer
(synthetic/src/data/tokenizers/simple_tokenizer.py) numbers the data tokens 0..max_vocab_id and puts five
special tokens above them, in this order: pad, bos, eos, mask, sep (so ``vocab_size = max_vocab_id + 6``).
We keep those ids, so a sequence here is their sequence, id for id. In the text form data tokens are their
decimal ids and special tokens are named: ``<bos> 3 14 7 <sep> 3 14 7 <eos>``.

Lengths. The authors' generator (scripts/generate_data.py) draws a ``seq_len`` per sample uniformly from
[seq_len - vary_len, seq_len + vary_len] (48 +- 16 for most tasks) and their collator right-pads a batch to its
longest sample. Here ``sample(num, length, seed)`` makes sequences of exactly ``length`` tokens, as every task of
this library does: each task maps ``length`` to the authors' ``seq_len`` (``seq_len_of``) and back
(``length_of``). The authors' training range is then ``TrainConfig.length = length_of(high)`` with a
``TrainConfig.length_spread`` that reaches ``length_of(low)`` (``training_lengths``): every training row holds
one document of a length drawn uniformly from the task's valid lengths in that range, the rest of the row
padding that no token attends to, as the authors' right padding. Validation stays at ``length``.

Test splits: the authors generate one test file per ``seq_len`` (``--mdps_seq_len``, vary_len 0) of 1,000
sequences (``--test_size``), powers of two from 64; a task's ``longest_test`` field says how far (its default: the
authors' range for that task). Each split is named ``test``, carries ``seq_len`` in its parameters, holds the
evaluation budget's sequences up to seq_len 1024 and as many tokens as there beyond (``AuthorsTests``), and uses
the seed TEST_SEED + its index (64 is 0).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ...utils.checks import int_in_range
from ..task import TEST_SEED, EvalSplit, Task
from .density_splits import check_num  # noqa: F401 (the suite's modules import it here)

SPECIALS = ("pad", "bos", "eos", "mask", "sep")  # SimpleTokenizer's order, ids max_vocab_id + 1 ...
FIRST_TEST = 64  # the authors' shortest test seq_len (scripts/generate_data.py: --mdps_seq_len "64 128 ...")
# Up to this seq_len every test split holds the evaluation budget's sequences; beyond it as many tokens as there (the
# O(S^2) kinds spend minutes per 100 sequences at seq_len 4096 on 2 cores).
FULL_TEST_SEQ_LEN = 1024
longest_test_check = int_in_range(FIRST_TEST)  # every task's longest_test: at least the shortest test seq_len


class Specials:
    """The special-token ids above ``max_vocab_id`` (SimpleTokenizer's), and the text words of every id."""

    def __init__(self, max_vocab_id: int):
        self.max_vocab_id = max_vocab_id
        self.pad, self.bos, self.eos, self.mask, self.sep = range(max_vocab_id + 1, max_vocab_id + 6)
        self.end = max_vocab_id + 6  # the first id above the tokenizer's vocabulary
        self.names = {max_vocab_id + 1 + i: f"<{name}>" for i, name in enumerate(SPECIALS)}
        self.ids = {word: i for i, word in self.names.items()}


def decode_words(tokens: torch.Tensor, specials: Specials, label0: int | None = None) -> str:
    """Data ids as decimals, special tokens by name, label ids (from ``label0``) as ``y<value>``."""
    words = []
    for t in tokens.tolist():
        if t in specials.names:
            words.append(specials.names[t])
        elif label0 is not None and t >= label0:
            words.append(f"y{t - label0}")
        else:
            words.append(str(t))
    return " ".join(words)


def encode_words(
    task: str, line: str, specials: Specials, data_limit: int, labels: int = 0, label0: int = 0
) -> list[int]:
    """Ids of the words of ``line``: decimals 0..data_limit-1, the five special names, and ``y0``..``y<labels-1>``
    when the task has labels (ids from ``label0``); a ValueError naming an unknown word."""
    text = line.strip()
    ids = []
    for word in text.split():
        if word in specials.ids:
            ids.append(specials.ids[word])
            continue
        is_label = bool(labels) and word[:1] == "y"
        digits = word[1:] if is_label else word
        good = digits.isascii() and digits.isdigit() and str(int(digits)) == digits
        if good and int(digits) < (labels if is_label else data_limit):
            ids.append(label0 + int(digits) if is_label else int(digits))
        else:
            label_words = f", y0..y{labels - 1}" if labels else ""
            raise ValueError(
                f"{task}: malformed sequence {text[:40]!r}: unknown token {word!r}; expected 0..{data_limit - 1}"
                f"{label_words} or one of {' '.join(specials.ids)}"
            )
    if not ids:
        raise ValueError(f"{task}: empty sequence; expected tokens")
    return ids


def malformed(task: str, line: str, why: str) -> ValueError:
    return ValueError(f"{task}: malformed sequence {line.strip()[:40]!r}: {why}")


def test_seq_lens(longest: int) -> list[int]:
    """The authors' test seq_len values up to ``longest``: 64, 128, 256, ..."""
    out, s = [], FIRST_TEST
    while s <= longest:
        out.append(s)
        s *= 2
    return out


def seq_len_splits(task: Task, train_length: int, sequences: int, draw=None) -> list[EvalSplit]:
    """One ``test`` split per seq_len of ``test_seq_lens(task.longest_test)``, ``length_of(seq_len)`` tokens,
    ``task.split_size`` sequences each (``AuthorsTests``); split k uses TEST_SEED + k. ``draw(num, length, seed)``
    makes a split's sequences (default: ``task.sample``)."""
    task.check_length(train_length)
    draw = draw or task.sample
    splits = []
    for index, seq_len in enumerate(test_seq_lens(task.longest_test)):
        length = task.length_of(seq_len)
        try:
            batch = draw(task.split_size(sequences, train_length, length), length, TEST_SEED + index)
        except ValueError as err:
            raise ValueError(f"{task.name}: the test split at seq_len = {seq_len}: {err}") from None
        splits.append(EvalSplit("test", {**dataclasses.asdict(task), "seq_len": seq_len}, batch))
    return splits


class AuthorsTests:
    """The test splits every task of the suite shares (a mixin before ``Task``): ``test`` at seq_len 64, 128, ...
    up to ``longest_test``, the evaluation budget's sequences each up to seq_len FULL_TEST_SEQ_LEN and as many
    tokens as there beyond it."""

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        return seq_len_splits(self, train_length, sequences)

    def full_test_length(self, train_length: int) -> int:
        return max(train_length, self.length_of(FULL_TEST_SEQ_LEN))


def training_lengths(task: Task) -> tuple[int, float]:
    """(TrainConfig.length, TrainConfig.length_spread) that train on the authors' seq_len range
    ``task.authors_train_seq_len``: the longest as the length, a spread reaching the shortest (half a token
    below it, so that rounding never drops it)."""
    low, high = task.authors_train_seq_len
    length = task.length_of(high)
    return length, (length - task.length_of(low) + 0.5) / length


def after_first(tokens: torch.Tensor, token: int) -> torch.Tensor:
    """True at every position after the first ``token`` of its row."""
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 1:] = (tokens == token).cumsum(dim=1)[:, :-1] > 0
    return mask


def mean(values: torch.Tensor) -> float:
    return values.double().mean().item() if values.numel() else math.nan
