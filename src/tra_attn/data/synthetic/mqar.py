"""Multi-query associative recall (MQAR), generated procedurally.

Our own generator in the spirit of the zoology benchmark (Arora et al. 2023, arXiv 2312.04927): a
sequence first binds ``num_pairs`` distinct keys to values, then a separator, then queries: every
query is a key followed by the value the pairs bound to it. Only the values after queries are scored.

Grammar (space-separated words in the text format; docs/suite_tasks.md has the details):

    sequence := units in this order, filler '.' interleaved uniformly at random, exactly `length` tokens
    units    := pair{num_pairs} '|' query{Q}
    pair     := key value           keys distinct within a sequence, values uniform (repeats allowed)
    query    := key value           the key uniform among the bound keys, the value the one bound to it

Filler tokens make up round(filler_density * length) of the sequence (one more when parity needs it);
the queries fill what the pairs and the separator leave. So a longer sequence keeps the same pairs and
filler density, and holds proportionally more queries, spread proportionally further from their pairs:
the memory the task needs is the same at every length, only the distances grow.

Token ids: filler '.'=0, separator '|'=1, keys 'k0'... = 2..., values 'v0'... after the keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...utils.checks import in_range, int_in_range, is_int, option
from ..task import EvalSplit, Task, TaskBatch, register_task
from .density_splits import density_splits

FILLER, SEP, KEY0 = 0, 1, 2
ROLES = ("bound key", "bound value", "other pair", "separator", "earlier query", "filler", "the query")  # key_roles


def round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


@register_task
@dataclass(frozen=True)
class MultiQueryRecall(Task):
    """Multi-query associative recall: key-value pairs, then queried keys whose bound values are scored."""

    num_pairs: int = option(8, "key-value pairs per sequence (distinct keys)", int_in_range(1))
    num_keys: int = option(32, "key vocabulary size (at least num_pairs)", int_in_range(1))
    num_values: int = option(32, "value vocabulary size (at least 2)", int_in_range(2))
    filler_density: float = option(0.5, "fraction of filler tokens, in [0, 1)", in_range(0.0, 1.0, what="a fraction"))

    name = "mqar"

    def __post_init__(self):
        super().__post_init__()
        if self.num_keys < self.num_pairs:
            raise ValueError(
                f"mqar: num_keys = {self.num_keys}; expected at least num_pairs = {self.num_pairs} "
                f"(the keys of a sequence are distinct)"
            )

    @property
    def vocab_size(self) -> int:
        return KEY0 + self.num_keys + self.num_values

    @property
    def value0(self) -> int:
        return KEY0 + self.num_keys

    def layout(self, length: int) -> tuple[int, int]:
        """(queries, filler tokens) of a ``length``-token sequence; queries < 1 if none fits."""
        filler = round_half_up(self.filler_density * length)
        rest = length - filler - 1 - 2 * self.num_pairs
        return rest // 2, filler + rest % 2

    def min_length(self) -> int:
        """The shortest length with room for one query, by bisection: the non-filler count never falls as
        length grows, and lies within 0.5 of length * (1 - filler_density)."""
        need = 2 * self.num_pairs + 3
        low = max(need, math.floor((need - 0.5) / (1.0 - self.filler_density)) - 1)  # too short or just fits
        high = math.ceil((need + 0.5) / (1.0 - self.filler_density)) + 1  # fits
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if self.layout(middle)[0] >= 1 else (middle + 1, high)
        return low

    def check_length(self, length) -> int:
        if not is_int(length) or length < self.min_length():
            raise ValueError(
                f"mqar: length = {length!r}; expected an integer >= {self.min_length()} (num_pairs = "
                f"{self.num_pairs} pairs, the separator and one query at filler_density = {self.filler_density})"
            )
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same sequences."""
        self.check_length(length)
        if not is_int(num) or num < 0:
            raise ValueError(f"mqar: num = {num!r}; expected a non-negative integer")
        gen = torch.Generator().manual_seed(seed)
        k = self.num_pairs
        queries, filler = self.layout(length)
        keys = torch.rand(num, self.num_keys, generator=gen).argsort(dim=1, stable=True)[:, :k] + KEY0
        values = torch.randint(self.num_values, (num, k), generator=gen) + self.value0
        asked = torch.randint(k, (num, queries), generator=gen)
        sep = torch.full((num, 1), SEP)
        firsts = torch.cat([keys, sep, keys.gather(1, asked)], dim=1)  # the first token of every unit
        seconds = torch.cat([values, sep, values.gather(1, asked)], dim=1)  # the second (none for '|')
        widths = torch.tensor([2] * k + [1] + [2] * queries)
        # A uniformly random choice of which of the units + filler slots hold units, in unit order.
        units = widths.numel()
        slots = torch.rand(num, units + filler, generator=gen).argsort(dim=1, stable=True)[:, :units]
        starts = slots.sort(dim=1).values + (widths.cumsum(0) - widths) - torch.arange(units)
        tokens = torch.full((num, length), FILLER)
        tokens.scatter_(1, starts, firsts)
        pairs = widths == 2
        tokens.scatter_(1, starts[:, pairs] + 1, seconds[:, pairs])
        return TaskBatch(tokens, self.loss_mask(tokens))

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """iid, sparse and dense at the training length, then iid at 2x, 4x and 8x; split k uses TEST_SEED + k."""
        return density_splits(self, "filler_density", train_length, sequences)

    def encode_text(self, line: str) -> torch.Tensor:
        """'k3 v7 . | k3 v7' -> token ids, validating the grammar and that every query is answered as bound."""
        words = line.split()
        ids = [self._word_id(word, line) for word in words]
        if ids.count(SEP) != 1:
            raise ValueError(f"mqar: malformed sequence {line.strip()[:40]!r}; expected exactly one separator '|'")
        bound: dict[int, int] = {}
        after_sep = False
        for i, token in enumerate(ids):
            if token == SEP:
                after_sep = True
            elif self._is_value(token) and (i == 0 or not self._is_key(ids[i - 1])):
                raise ValueError(f"mqar: malformed sequence {line.strip()[:40]!r}: value {words[i]!r} follows no key")
            elif self._is_key(token):
                if i + 1 == len(ids) or not self._is_value(ids[i + 1]):
                    raise ValueError(
                        f"mqar: malformed sequence {line.strip()[:40]!r}: key {words[i]!r} is not followed by a value"
                    )
                if not after_sep and token in bound:
                    raise ValueError(f"mqar: malformed sequence {line.strip()[:40]!r}: key {words[i]!r} bound twice")
                if not after_sep:
                    bound[token] = ids[i + 1]
                elif bound.get(token) != ids[i + 1]:
                    expected = "an unbound key" if token not in bound else f"{self._word(bound[token])!r}"
                    raise ValueError(
                        f"mqar: malformed sequence {line.strip()[:40]!r}: query {words[i]!r} answered "
                        f"{words[i + 1]!r}; the pairs bind it to {expected}"
                    )
        return torch.tensor(ids)

    def decode_text(self, tokens: torch.Tensor) -> str:
        return " ".join(self._word(int(t)) for t in tokens)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """True at every token that follows a key after the separator: the answers to the queries."""
        after_sep = (tokens == SEP).cumsum(dim=1) > 0
        mask = torch.zeros_like(tokens, dtype=torch.bool)
        mask[:, 1:] = (after_sep & self._is_key(tokens))[:, :-1]
        return mask

    def statistics(self, batch: TaskBatch) -> dict:
        """Pairs and queries per sequence, the filler fraction and query distances (query key to bound key)."""
        tokens = batch.tokens
        n, length = tokens.shape
        after_sep = (tokens == SEP).cumsum(dim=1) > 0
        keys = self._is_key(tokens)
        pair_keys, query_keys = keys & ~after_sep, keys & after_sep
        # Position of every bound key, by key id (-1 if unbound): a query's distance is its position minus this.
        where = torch.full((n, self.vocab_size), -1)
        pos = torch.arange(length).expand(n, length)
        where.scatter_(1, torch.where(pair_keys, tokens, FILLER), torch.where(pair_keys, pos, -1))
        distances = (pos - where.gather(1, tokens))[query_keys].double()
        return {
            "sequences": n,
            "length": length,
            "pairs_per_sequence": pair_keys.sum().item() / max(n, 1),
            "queries_per_sequence": query_keys.sum().item() / max(n, 1),
            "filler_fraction": (tokens == FILLER).double().mean().item() if n else math.nan,
            "mean_query_distance": distances.mean().item() if distances.numel() else math.nan,
            "max_query_distance": distances.max().item() if distances.numel() else math.nan,
        }

    def key_roles(self, tokens: torch.Tensor) -> tuple[tuple[str, ...], torch.Tensor]:
        """Per query key (row i): the pair that binds it (its key, its value), the other pairs, the separator,
        the earlier queries (keys and answers), the filler, and the query itself."""
        n, length = tokens.shape
        after_sep = (tokens == SEP).cumsum(dim=1) > 0
        pair_keys = self._is_key(tokens) & ~after_sep
        pair_values = torch.zeros_like(pair_keys)
        pair_values[:, 1:] = pair_keys[:, :-1]
        by_key = torch.full_like(tokens, ROLES.index("earlier query"))  # what each key is, whatever the query
        by_key[pair_keys | pair_values] = ROLES.index("other pair")
        by_key[tokens == SEP] = ROLES.index("separator")
        by_key[tokens == FILLER] = ROLES.index("filler")
        roles = by_key[:, None, :].expand(n, length, length).clone()
        bound = pair_keys[:, None, :] & (tokens[:, None, :] == tokens[:, :, None])  # (query i, key j): same key
        bound_value = torch.zeros_like(bound)
        bound_value[..., 1:] = bound[..., :-1]
        roles[bound] = ROLES.index("bound key")
        roles[bound_value] = ROLES.index("bound value")
        roles[:, torch.arange(length), torch.arange(length)] = ROLES.index("the query")
        return ROLES, roles

    def _is_key(self, token):
        return (token >= KEY0) & (token < self.value0)

    def _is_value(self, token):
        return (token >= self.value0) & (token < self.vocab_size)

    def _word(self, token: int) -> str:
        if token == FILLER:
            return "."
        if token == SEP:
            return "|"
        return f"k{token - KEY0}" if self._is_key(token) else f"v{token - self.value0}"

    def _word_id(self, word: str, line: str) -> int:
        if word in (".", "|"):
            return FILLER if word == "." else SEP
        kind, number = word[:1], word[1:]
        limit = {"k": self.num_keys, "v": self.num_values}.get(kind)
        if (
            limit is None
            or not (number.isascii() and number.isdigit())
            or int(number) >= limit
            or str(int(number)) != number
        ):
            raise ValueError(
                f"mqar: malformed sequence {line.strip()[:40]!r}: unknown token {word!r}; expected '.', '|', "
                f"k0..k{self.num_keys - 1} or v0..v{self.num_values - 1}"
            )
        return (KEY0 if kind == "k" else self.value0) + int(number)
