"""RULER's variable tracking on synthetic tokens: ``ruler_variable_tracking`` (docs/ruler_suite.md).

Follows NVIDIA/RULER at commit c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a: the generator
scripts/data/synthetic/variable_tracking.py (``generate_chains``: num_chains chains of num_hops + 1 distinct
variables, the first assigned a 5-digit number ``np.random.randint(10000, 99999)``, each next one the previous
variable; ``generate_input_output`` with the noise haystack: each chain's assignments at sorted random places, so
in chain order, the chains interleaved; the query is the first chain's number and the answer its variables) and
the configuration ``vt`` of scripts/synthetic.yaml (noise haystack, num_chains 1, num_hops 4). Scored as their
``string_match_all`` reads: every variable of the chain.

Grammar (the vocabulary is ruler_layout.py's):

    sequence := haystack with assignments inserted, '?' digit{D} ':' var{num_hops + 1}    exactly `length` tokens
    head     := '#' var '=' digit{D}        a chain's first variable gets a number (first digit nonzero)
    hop      := '#' var '=' var             the next one gets the previous one, after it in the sequence
    answer   := the queried chain's variables, in chain order

    a b # w7 = 1 4 0 2 9 c d # w3 = w7 e # w40 = w3 f g # w9 = w40 h # w21 = w9 i ? 1 4 0 2 9 : w7 w3 w40 w9 w21

Variables are distinct words; the chains' numbers are distinct (RULER draws them independently, so that two chains
almost never share one; with the answer scored token by token a shared number would make it ambiguous).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...utils.checks import int_in_range, option
from ..task import TaskBatch, register_task
from .ruler_haystack import haystack, insert_units
from .ruler_layout import (
    ANSWER,
    FILLER0,
    MARK,
    QUERY,
    SEP,
    WORD0,
    RulerTask,
    answer_mask,
    check_num,
    digits_of,
    haystack_kind,
    is_filler,
    mean,
)


def distinct_numbers(num: int, count: int, low: int, high: int, gen: torch.Generator) -> torch.Tensor:
    """(num, count) numbers uniform in [low, high), distinct within a row (rows with a repeat are redrawn)."""
    numbers = torch.randint(low, high, (num, count), generator=gen)
    while True:
        ordered = numbers.sort(dim=1).values
        repeated = (ordered[:, 1:] == ordered[:, :-1]).any(dim=1)
        if not repeated.any():
            return numbers
        numbers[repeated] = torch.randint(low, high, (int(repeated.sum()), count), generator=gen)


@register_task
@dataclass(frozen=True)
class RulerVariableTracking(RulerTask):
    """RULER vt: chains of assignments (X1 = 12345, X2 = X1, ...) in filler; the number's variables answered."""

    num_chains: int = option(1, "chains of assignments (RULER's num_chains)", int_in_range(1))
    num_hops: int = option(4, "assignments of a variable to a variable per chain (RULER's)", int_in_range(0))
    value_digits: int = option(5, "digits of a chain's number, the first nonzero (RULER's 5)", int_in_range(1))
    haystack: str = option(
        "noise",
        "'noise' (RULER's repeated sentence: filler symbols in a cycle) or 'essay' (filler at random)",
        haystack_kind,
    )
    num_words: int = option(
        64, "the variable names (words w0...), at least num_chains * (num_hops + 1)", int_in_range(1)
    )

    name = "ruler_variable_tracking"

    def __post_init__(self):
        super().__post_init__()
        if self.num_words < self.variables:
            raise ValueError(
                f"{self.name}: num_words = {self.num_words}; expected at least num_chains * (num_hops + 1) = "
                f"{self.variables} (every variable of a sequence is a distinct word)"
            )
        low, high = self.number_range
        if high - low < self.num_chains:
            raise ValueError(
                f"{self.name}: value_digits = {self.value_digits} gives {high - low} numbers; expected at least "
                f"num_chains = {self.num_chains} (the chains' numbers are distinct)"
            )

    @property
    def variables(self) -> int:
        return self.num_chains * (self.num_hops + 1)

    @property
    def number_range(self) -> tuple[int, int]:
        """[low, high) of a chain's number: RULER's np.random.randint(10000, 99999) for 5 digits."""
        return 10 ** (self.value_digits - 1), 10**self.value_digits - 1

    def fixed_tokens(self) -> int:
        """The tokens of every sequence but the haystack: the assignments, the query and the answer."""
        d = self.value_digits
        return self.num_chains * (3 + d + 4 * self.num_hops) + (d + 2) + (self.num_hops + 1)

    def min_length(self) -> int:
        return self.fixed_tokens() + 1

    def what_fits(self) -> str:
        return "the assignments, the query and the answer, and one haystack token"

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same ones."""
        self.check_length(length)
        check_num(self.name, num)
        gen = torch.Generator().manual_seed(seed)
        c, h, d = self.num_chains, self.num_hops, self.value_digits
        size = length - self.fixed_tokens()
        names = torch.rand(num, self.num_words, generator=gen).argsort(dim=1, stable=True)[:, : self.variables]
        names = (names + WORD0).view(num, c, h + 1)
        numbers = digits_of(distinct_numbers(num, c, *self.number_range, gen), d)  # (num, c, d)
        filler = haystack(self.haystack, num, size, gen)
        # Each chain's assignments at uniform places, in chain order (the sorted draws), the chains interleaved.
        places = (torch.rand(num, c, h + 1, generator=gen, dtype=torch.float64) * (size + 1)).sort(dim=2).values
        units = torch.zeros(num, c, h + 1, 3 + d, dtype=torch.long)
        units[..., 0], units[..., 1], units[..., 2] = MARK, names, SEP
        units[:, :, 0, 3:] = numbers
        units[:, :, 1:, 3] = names[:, :, :-1]
        widths = torch.full((num, c, h + 1), 4)
        widths[:, :, 0] = 3 + d
        context, _ = insert_units(
            filler, units.view(num, c * (h + 1), 3 + d), widths.view(num, -1), places.view(num, -1)
        )
        query = torch.cat([torch.full((num, 1), QUERY), numbers[:, 0], torch.full((num, 1), ANSWER)], dim=1)
        tokens = torch.cat([context, query, names[:, 0]], dim=1)
        return TaskBatch(tokens, self.loss_mask(tokens))

    def solve(self, context: list[int], query: list[int]) -> list[int]:
        """The variables bound to the queried number, in chain order; checks the assignments and the query."""
        d = self.value_digits
        source: dict[int, int | tuple[int, ...]] = {}  # variable -> its number (a tuple) or the variable before it
        i = 0
        while i < len(context):
            t = context[i]
            if FILLER0 <= t < WORD0:
                i += 1
                continue
            if t != MARK or i + 3 >= len(context) or context[i + 1] < WORD0 or context[i + 2] != SEP:
                raise ValueError("expected only filler symbols and assignments '#' var '=' ... before '?'")
            var, value = context[i + 1], context[i + 3]
            if var in source:
                raise ValueError(f"variable {self.decode_text(torch.tensor([var]))!r} assigned twice")
            if value >= WORD0:
                if value not in source:
                    raise ValueError("expected every variable assigned a variable to come after that variable's own")
                source[var], i = value, i + 4
            else:
                number = tuple(context[i + 3 : i + 3 + d])
                if len(number) != d or any(x >= 10 for x in number) or number[0] == 0:
                    raise ValueError(
                        f"expected every chain to start with '#' var '=' and {d} digits, the first nonzero"
                    )
                source[var], i = number, i + 3 + d
        heads = [var for var, value in source.items() if isinstance(value, tuple)]
        if len(heads) != self.num_chains or len(source) != self.variables:
            raise ValueError(f"expected {self.num_chains} chain(s) of {self.num_hops + 1} variables")
        if len(query) != d or tuple(query) not in {source[var] for var in heads}:
            raise ValueError(f"expected the number of one chain ({d} digits) between '?' and ':'")
        chain = [next(var for var in heads if source[var] == tuple(query))]
        while True:
            following = [var for var, value in source.items() if value == chain[-1]]
            if not following:
                break
            if len(following) > 1:
                raise ValueError("expected chains: a variable assigned to two others")
            chain.append(following[0])
        if len(chain) != self.num_hops + 1:
            raise ValueError(f"expected the queried chain to have {self.num_hops + 1} variables")
        return chain

    def statistics(self, batch: TaskBatch) -> dict:
        """Chains, the answer's length, the distance from the queried chain's first assignment to '?', the
        haystack fraction."""
        tokens = batch.tokens
        n, length = tokens.shape
        pos = torch.arange(length).expand(n, length)
        question = (tokens == QUERY).long().argmax(dim=1)
        first_answer = answer_mask(tokens).long().argmax(dim=1)
        head_var = tokens.gather(1, first_answer[:, None])
        after = [torch.roll(tokens, -s, dims=1) for s in (1, 3)]
        heads = (tokens == MARK) & (after[1] < 10) & (pos < question[:, None])
        queried = heads & (after[0] == head_var)
        distances = (question[:, None] - pos)[queried]
        return {
            **self.base_statistics(batch),
            "chains_per_sequence": mean(heads.sum(dim=1)),
            "mean_head_distance": mean(distances),
            "max_head_distance": distances.max().item() if distances.numel() else math.nan,
            "haystack_fraction": mean(is_filler(tokens).double()),
        }
