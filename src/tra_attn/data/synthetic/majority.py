"""Majority of marked bits among distractor bits, generated procedurally.

Our own selective-counting task: ``num_marked`` bits (an odd number, so there is no tie) are each
preceded by a marker; unmarked distractor bits and blanks lie between them; after a query token the
model must output the majority of the MARKED bits only. Only that answer is scored. (Majority rather
than parity: parity is notoriously hard to learn for transformers, majority is learnable and still
needs the model to select the marked bits and aggregate them over the whole sequence.)

Grammar (one character per token in the text format; docs/suite_tasks.md has the details):

    sequence := body '?' answer        exactly `length` tokens
    body     := ('.' | bit | '*' bit)*  exactly num_marked marked bits '*' bit, in length - 2 tokens
    answer   := the majority bit of the marked bits

The body holds round(distractor_density * (length - 2)) distractor bits; blanks '.' fill what the
marked bits and the distractors leave. The marked bits (as units) and the distractors lie at a
uniformly random arrangement of the body, bits uniform. So a longer sequence aggregates the same
number of marked bits, spread proportionally further apart, with proportionally more distractors
between them at the same density.

Token ids: blank '.'=0, marker '*'=1, query '?'=2, '0'=3, '1'=4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...utils.checks import in_range, is_int, option
from ..task import EvalSplit, Task, TaskBatch, register_task
from .density_splits import density_splits

CHARS = ".*?01"
BLANK, MARK, QUERY, ZERO, ONE = range(5)
VOCAB_SIZE = len(CHARS)
_CHAR_TO_ID = {c: i for i, c in enumerate(CHARS)}
ROLES = ("marked bit", "marker", "distractor bit", "blank", "query or answer")  # key_roles


def answer_mask(tokens: torch.Tensor) -> torch.Tensor:
    """True at every token that follows a query."""
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 1:] = tokens[:, :-1] == QUERY
    return mask


def _odd(value) -> str | None:
    return None if is_int(value) and value >= 1 and value % 2 else "a positive odd integer (no ties)"


@register_task
@dataclass(frozen=True)
class Majority(Task):
    """Majority of the marked bits among unmarked distractor bits, answered after a query token."""

    num_marked: int = option(7, "marked bits per sequence (odd: no ties)", _odd)
    distractor_density: float = option(
        0.5,
        "fraction of the tokens before the query that are distractor bits, in [0, 1)",
        in_range(0.0, 1.0, what="a fraction"),
    )

    name = "majority"
    vocab_size = VOCAB_SIZE

    def layout(self, length: int) -> tuple[int, int]:
        """(distractor bits, blanks) of a ``length``-token sequence; blanks < 0 if the marked bits do not fit."""
        body = length - 2
        distractors = math.floor(self.distractor_density * body + 0.5)
        return distractors, body - distractors - 2 * self.num_marked

    def min_length(self) -> int:
        """The shortest length with room for the marked bits, by bisection: the blanks never fall as length
        grows, and lie within 0.5 of (length - 2) * (1 - distractor_density) - 2 * num_marked."""
        need, room = 2 * self.num_marked, 1.0 - self.distractor_density
        low, high = need + 2, math.ceil((need + 0.5) / room) + 3
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if self.layout(middle)[1] >= 0 else (middle + 1, high)
        return low

    def check_length(self, length) -> int:
        if not is_int(length) or length < self.min_length():
            raise ValueError(
                f"majority: length = {length!r}; expected an integer >= {self.min_length()} (num_marked = "
                f"{self.num_marked} marked bits at distractor_density = {self.distractor_density}, the query "
                f"and the answer)"
            )
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same sequences."""
        self.check_length(length)
        if not is_int(num) or num < 0:
            raise ValueError(f"majority: num = {num!r}; expected a non-negative integer")
        gen = torch.Generator().manual_seed(seed)
        n, body = self.num_marked, length - 2
        distractors, blanks = self.layout(length)
        marked = torch.randint(2, (num, n), generator=gen)
        # The marked units take a uniformly random n of the n + distractors + blanks slots, in order.
        slots = n + distractors + blanks
        chosen = torch.rand(num, slots, generator=gen).argsort(dim=1, stable=True)[:, :n].sort(dim=1).values
        starts = chosen + torch.arange(n)  # each earlier marked unit is one token longer than a slot
        tokens = torch.full((num, length), BLANK)
        tokens.scatter_(1, starts, MARK)
        tokens.scatter_(1, starts + 1, marked + ZERO)
        # The distractors take a uniformly random subset of the single-token slots.
        free = (tokens[:, :body] == BLANK).nonzero()[:, 1].view(num, slots - n)
        pick = torch.rand(num, slots - n, generator=gen).argsort(dim=1, stable=True)[:, :distractors]
        bits = torch.randint(2, (num, distractors), generator=gen) + ZERO
        tokens.scatter_(1, free.gather(1, pick), bits)
        tokens[:, body] = QUERY
        tokens[:, body + 1] = ZERO + (2 * marked.sum(dim=1) > n).long()
        return TaskBatch(tokens, answer_mask(tokens))

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """iid, sparse and dense at the training length, then iid at 2x, 4x and 8x; split k uses TEST_SEED + k."""
        return density_splits(self, "distractor_density", train_length, sequences)

    def encode_text(self, line: str) -> torch.Tensor:
        return encode(line)

    def decode_text(self, tokens: torch.Tensor) -> str:
        return "".join(CHARS[int(t)] for t in tokens)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        return answer_mask(tokens)

    def statistics(self, batch: TaskBatch) -> dict:
        return statistics(batch)

    def key_roles(self, tokens: torch.Tensor) -> tuple[tuple[str, ...], torch.Tensor]:
        """The same for the one query: marked bits (relevant), markers, unmarked bits (distractors), blanks."""
        bits = (tokens == ZERO) | (tokens == ONE)
        after_mark = torch.zeros_like(bits)
        after_mark[:, 1:] = tokens[:, :-1] == MARK
        roles = torch.full_like(tokens, ROLES.index("query or answer"))
        roles[bits & after_mark] = ROLES.index("marked bit")
        roles[tokens == MARK] = ROLES.index("marker")
        roles[bits & ~after_mark & ~answer_mask(tokens)] = ROLES.index("distractor bit")
        roles[tokens == BLANK] = ROLES.index("blank")
        return ROLES, roles


def encode(line: str) -> torch.Tensor:
    """'*1.0*1?1' -> token ids, validating the grammar and that the answer is the majority of the marked bits."""
    text = line.strip()
    bad = sorted(set(text) - set(CHARS))
    if len(text) < 2 or bad or text[-2] != "?" or text.count("?") != 1:
        raise ValueError(
            f"majority: malformed sequence {text[:40]!r}; expected characters of {CHARS!r} ending in '?' and "
            f"the answer bit"
        )
    body, answer = text[:-2], text[-1]
    marked = [body[i + 1 : i + 2] for i, c in enumerate(body) if c == "*"]
    if any(bit not in ("0", "1") for bit in marked) or answer not in "01":
        raise ValueError(f"majority: malformed sequence {text[:40]!r}; expected a bit after every '*' and after '?'")
    if len(marked) % 2 == 0:
        raise ValueError(f"majority: sequence {text[:40]!r} has {len(marked)} marked bits; expected an odd number")
    majority = "1" if 2 * marked.count("1") > len(marked) else "0"
    if answer != majority:
        raise ValueError(
            f"majority: sequence {text[:40]!r} answers {answer!r}; its marked bits' majority is {majority!r}"
        )
    return torch.tensor([_CHAR_TO_ID[c] for c in text])


def statistics(batch: TaskBatch) -> dict:
    """Marked and distractor bits per sequence, their density, distances from marked bits to the query."""
    tokens = batch.tokens
    n, length = tokens.shape
    bits = (tokens == ZERO) | (tokens == ONE)
    after_mark = torch.zeros_like(bits)
    after_mark[:, 1:] = tokens[:, :-1] == MARK
    answers = answer_mask(tokens)
    marked, distractors = bits & after_mark, bits & ~after_mark & ~answers
    pos = torch.arange(length).expand(n, length)
    distances = (length - 2 - pos)[marked].double()  # from each marked bit to the query
    return {
        "sequences": n,
        "length": length,
        "marked_per_sequence": marked.sum().item() / max(n, 1),
        "distractors_per_sequence": distractors.sum().item() / max(n, 1),
        "distractor_fraction": distractors.sum().item() / max(n * (length - 2), 1),
        "blank_fraction": (tokens == BLANK).sum().item() / max(n * (length - 2), 1),
        "mean_marked_distance": distances.mean().item() if distances.numel() else math.nan,
        "max_marked_distance": distances.max().item() if distances.numel() else math.nan,
        "answer_one_fraction": (tokens[answers] == ONE).double().mean().item() if answers.any() else math.nan,
    }
