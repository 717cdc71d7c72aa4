"""Passkey retrieval, generated procedurally: a short digit key hidden at a depth in filler, asked for at the end.

Our own generator of the test long-context papers use (e.g. Mohtashami and Jaggi 2023, arXiv 2305.16300),
with a small vocabulary instead of English. Only the answer digits are scored, so the task's full-sequence
accuracy is exact match: every digit of the key right.

Grammar (one character per token in the text format; docs/passkey.md has the details):

    sequence := filler* '#' key filler* '?' key     exactly `length` tokens
    key      := digit{key_digits}                   digits uniform, repeats allowed

The key block '#' key starts ``round(depth * F)`` tokens into the sequence, F = length - 2 key_digits - 2
being the filler tokens (depth 0: the key opens the sequence; 1: it sits just before the question);
``depth=None`` draws the start uniformly from the F + 1 places (training). Filler ``repeat``: the filler
symbols 'a', 'b', ... in a cycle that the key block interrupts (the classic "The grass is green. The sky is
blue..." repeated); ``iid``: each filler token uniform over the symbols.

Token ids: digits '0'-'9' = 0-9, key marker '#' = 10, question '?' = 11, filler 'a'... = 12...
"""

from __future__ import annotations

import dataclasses
import math
import string
from dataclasses import dataclass

import torch

from ...utils.checks import in_range, int_in_range, is_int, option, optional
from ..task import TEST_SEED, EvalSplit, Task, TaskBatch, register_task

KEY_MARK, QUESTION, FILLER0 = 10, 11, 12
MAX_FILLER = 26
CHARS = string.digits + "#?" + string.ascii_lowercase
FILLER_KINDS = ("repeat", "iid")
LENGTH_FACTORS = (1, 2, 4, 8, 16)  # the test lengths, as multiples of the training length
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the test depths at every length
# A depth parameter (passkey's, the RULER needles'): None, uniform over every place, or a fraction in [0, 1].
DEPTH = optional(in_range(0.0, 1.0, high_allowed=True, what="a fraction"), "None (uniform)")


def _filler_kind(value) -> str | None:
    return None if value in FILLER_KINDS else f"one of {list(FILLER_KINDS)}"


def answer_mask(tokens: torch.Tensor) -> torch.Tensor:
    """True at every token after the question mark: the answer digits."""
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 1:] = (tokens == QUESTION).cumsum(dim=1)[:, :-1] > 0
    return mask


def split_name(depth: float) -> str:
    """'depth0', 'depth0.25', ... 'depth1': the split of one depth."""
    return f"depth{depth:g}"


def length_depth_splits(task, train_length: int, sequences: int) -> list[EvalSplit]:
    """The length x depth grid of a task with a ``depth`` field: at each of LENGTH_FACTORS times the training length,
    a split per depth of DEPTHS; ``sequences`` per cell at the training length, the same token budget per cell
    beyond it (or ``sequences`` per cell at every length: ``Task.sequences_per_split``), and the depths of one
    length share their seed (TEST_SEED + the length's index)."""
    task.check_length(train_length)
    splits = []
    for index, factor in enumerate(LENGTH_FACTORS):
        length = factor * train_length
        num = task.split_size(sequences, train_length, length)
        for depth in DEPTHS:
            cell = dataclasses.replace(task, depth=depth)
            splits.append(
                EvalSplit(split_name(depth), dataclasses.asdict(cell), cell.sample(num, length, TEST_SEED + index))
            )
    return splits


@register_task
@dataclass(frozen=True)
class Passkey(Task):
    """Passkey retrieval: a digit key hidden at a depth in filler, recalled after the question."""

    key_digits: int = option(5, "digits of the key (the scored answer)", int_in_range(1))
    depth: float | None = option(
        None,
        "where the key block starts, as a fraction of the filler before it, in [0, 1] "
        "(default: uniform over every place, the training distribution)",
        DEPTH,
        flag_type=float,
    )
    filler: str = option("repeat", "filler: 'repeat' (a cycle of the symbols) or 'iid'", _filler_kind)
    num_filler: int = option(8, f"filler symbols 'a' onwards (1 to {MAX_FILLER})", int_in_range(1, MAX_FILLER))

    name = "passkey"

    @property
    def vocab_size(self) -> int:
        return FILLER0 + self.num_filler

    def filler_tokens(self, length: int) -> int:
        """F: the filler tokens of a ``length``-token sequence (all but the key block, '?' and the answer)."""
        return length - 2 * self.key_digits - 2

    def min_length(self) -> int:
        """The key block, the question, the answer and one filler token (so that depth means something)."""
        return 2 * self.key_digits + 3

    def check_length(self, length) -> int:
        if not is_int(length) or length < self.min_length():
            raise ValueError(
                f"passkey: length = {length!r}; expected an integer >= {self.min_length()} (key_digits = "
                f"{self.key_digits}: '#' and the key, '?' and the answer, and at least one filler token)"
            )
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same keys and filler at every depth."""
        self.check_length(length)
        if not is_int(num) or num < 0:
            raise ValueError(f"passkey: num = {num!r}; expected a non-negative integer")
        gen = torch.Generator().manual_seed(seed)
        k, f = self.key_digits, self.filler_tokens(length)
        keys = torch.randint(10, (num, k), generator=gen)
        if self.filler == "iid":
            filler = torch.randint(self.num_filler, (num, f), generator=gen) + FILLER0
        else:
            filler = (torch.arange(f) % self.num_filler + FILLER0).expand(num, f)
        if self.depth is None:
            starts = torch.randint(f + 1, (num, 1), generator=gen)
        else:
            starts = torch.full((num, 1), math.floor(self.depth * f + 0.5))
        context = f + k + 1  # every token before the question
        pos = torch.arange(context).expand(num, context)
        offset = pos - starts  # position within the key block: 0 is '#', 1..k the digits
        in_block = (offset >= 0) & (offset <= k)
        block = torch.where(offset == 0, KEY_MARK, keys.gather(1, (offset - 1).clamp(0, k - 1)))
        filler_index = torch.where(offset < 0, pos, pos - k - 1).clamp(0, f - 1)
        tokens = torch.cat(
            [torch.where(in_block, block, filler.gather(1, filler_index)), torch.full((num, 1), QUESTION), keys], dim=1
        )
        return TaskBatch(tokens, answer_mask(tokens))

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """The length x depth grid: at 1x, 2x, 4x, 8x and 16x the training length, every depth of DEPTHS.

        ``sequences`` per cell at the training length, the same token budget per cell beyond it. The depths of
        one length share their keys and filler (seed TEST_SEED + the length's index): only the key moves.
        """
        return length_depth_splits(self, train_length, sequences)

    def encode_text(self, line: str) -> torch.Tensor:
        """'abc#4721defg?4721' -> token ids, validating the grammar and that the answer is the key."""
        text = line.strip()
        symbols = CHARS[: FILLER0 + self.num_filler]
        bad = sorted(set(text) - set(symbols))
        if bad:
            raise ValueError(
                f"passkey: malformed sequence {text[:40]!r}: unknown characters {bad}; expected digits, '#', '?' "
                f"and the filler 'a'..{symbols[-1]!r}"
            )
        k = self.key_digits
        if text.count("#") != 1 or text.count("?") != 1 or text.index("#") > text.index("?"):
            raise ValueError(f"passkey: malformed sequence {text[:40]!r}; expected one '#' and then one '?'")
        mark, question = text.index("#"), text.index("?")
        key, answer = text[mark + 1 : mark + 1 + k], text[question + 1 :]
        digits = sum(c.isdigit() for c in text)
        if not (key.isdigit() and len(key) == k and answer.isdigit() and len(answer) == k and digits == 2 * k):
            raise ValueError(
                f"passkey: malformed sequence {text[:40]!r}; expected {k} digits after '#' and after '?' (the "
                f"end of the sequence), and no other digit"
            )
        if answer != key:
            raise ValueError(f"passkey: sequence {text[:40]!r} answers {answer!r}; the key after '#' is {key!r}")
        return torch.tensor([CHARS.index(c) for c in text])

    def decode_text(self, tokens: torch.Tensor) -> str:
        return "".join(CHARS[int(t)] for t in tokens)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        return answer_mask(tokens)

    def statistics(self, batch: TaskBatch) -> dict:
        """The key's depth (its start over the filler tokens) and distance (from '#' to '?'), the filler fraction."""
        tokens = batch.tokens
        n, length = tokens.shape
        marks = (tokens == KEY_MARK).int().argmax(dim=1).double()
        questions = (tokens == QUESTION).int().argmax(dim=1).double()
        filler = max(self.filler_tokens(length), 1)  # a sequence read from text may have none
        distances = questions - marks
        return {
            "sequences": n,
            "length": length,
            "key_digits": self.key_digits,
            "mean_depth": (marks / filler).mean().item() if n else math.nan,
            "mean_key_distance": distances.mean().item() if n else math.nan,
            "max_key_distance": distances.max().item() if n else math.nan,
            "filler_fraction": (tokens >= FILLER0).double().mean().item() if n else math.nan,
        }
