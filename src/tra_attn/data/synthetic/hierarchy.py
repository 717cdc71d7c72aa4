"""Hierarchical variable recall: flip-flop extended to nested scopes, generated procedurally.

Our own generator in the spirit of the TRA authors' hierarchical-reasoning tasks (their data is not
used): a read must return the value a variable has in the innermost open scope that assigns it, so a
model has to track which scopes are open, not just the most recent write.

Grammar (one character per token in the text format):

    sequence  := scope{r_count} '.'*                  exactly `length` tokens, '.' = PAD
    scope     := '(' item* ')'
    item      := statement | scope
    statement := op variable value                    op: '=' set, '?' get, '~' mention

``= v x`` assigns x to v in the innermost open scope (replacing an earlier assignment there); ``? v x``
reads v: x is its most recent assignment in the innermost open scope that assigns v (inner scopes
shadow outer ones); ``~ v x`` is a distractor that assigns nothing. A closing ``)`` discards the
assignments of its scope. Only the value after each ``?`` is scored.

Generated shape: each of the ``r_count`` top-level scopes is a tree of ``depth`` levels in which every
scope above the deepest has ``branching`` child scopes, and every scope holds exactly ``conslen``
statements, its children interleaved among them in uniformly random order. Sequences therefore have
``S * (2 + 3 * conslen)`` tokens of structure, S = r_count * (1 + branching + ... + branching^(depth-1))
scopes, followed by PAD up to ``length``. Each statement draws u ~ U[0, 1): a get if u < p_read and
some variable has a visible assignment (the variable uniform among those), else a set if u < p_read +
p_set, else a mention (variable and value uniform). So every get is determined by the tokens before it.

Token ids: PAD=0 '.', OPEN=1 '(', CLOSE=2 ')', SET=3 '=', GET=4 '?', MENTION=5 '~', variables 'a'-'z'
= 6-31, values '0'-'9' = 32-41; 42 ids whatever the parameters.
"""

from __future__ import annotations

import dataclasses
import math
import string
from dataclasses import dataclass, field

import torch

from ...utils.checks import Check, in_range, int_in_range, is_int, is_number, option
from ..task import TEST_SEED, EvalSplit, Task, TaskBatch, register_task, split_sequences

ALPHABET = ".()=?~" + string.ascii_lowercase + string.digits
PAD, OPEN, CLOSE, SET, GET, MENTION = range(6)
VARIABLE0, VALUE0 = 6, 32
MAX_VARIABLES, MAX_VALUES = 26, 10
VOCAB_SIZE = len(ALPHABET)
MAX_DEPTH = 64  # generation recurses once per level
OOD_FACTOR = 2  # the out-of-distribution splits double r_count, conslen or both
_CHAR_TO_ID = {c: i for i, c in enumerate(ALPHABET)}


def _probability(why_not_zero: str) -> Check:
    """A probability in (0, 1); zero is refused with ``why_not_zero``."""
    below_one = in_range(0.0, 1.0, what="a probability")

    def check(value) -> str | None:
        if below_one(value):
            return "a probability in (0, 1)"
        return f"a probability in (0, 1): {why_not_zero}" if is_number(value) and value == 0 else None

    return check


def _show(token: int) -> str:
    """A token as its text character, or its id when it is out of range."""
    return repr(ALPHABET[token]) if 0 <= token < VOCAB_SIZE else f"id {token}"


def read_mask(tokens: torch.Tensor) -> torch.Tensor:
    """True at every value that follows a get and its variable."""
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 2:] = tokens[:, :-2] == GET
    return mask


@register_task
@dataclass(frozen=True)
class Hierarchy(Task):
    """Hierarchical variable recall: gets resolve to the innermost open scope's assignment."""

    r_count: int = option(3, "top-level scopes (non-terminals) per sequence", int_in_range(1))
    conslen: int = option(4, "statements (terminals) directly inside every scope", int_in_range(1))
    depth: int = option(3, "nesting levels of every top-level scope (1: no nesting)", int_in_range(1, MAX_DEPTH))
    branching: int = option(1, "child scopes of every scope above the deepest level", int_in_range(1))
    num_variables: int = option(4, "variables in use, 'a' onwards (at most 26)", int_in_range(1, MAX_VARIABLES))
    num_values: int = option(10, "values in use, '0' onwards (2 to 10)", int_in_range(2, MAX_VALUES))
    p_read: float = option(
        0.4, "probability that a statement is a get", _probability("the gets' values are the only scored tokens")
    )
    p_set: float = option(0.4, "probability of a set (the rest are mentions)", _probability("gets need assignments"))

    name = "hierarchy"
    vocab_size = VOCAB_SIZE

    def __post_init__(self):
        super().__post_init__()
        if self.p_read + self.p_set > 1:
            raise ValueError(
                f"hierarchy: p_read + p_set = {self.p_read} + {self.p_set}; expected at most 1 "
                f"(the rest of the statements are mentions)"
            )

    @property
    def scopes(self) -> int:
        """Scopes per sequence: r_count trees of depth levels, branching children per inner scope."""
        return self.r_count * sum(self.branching**level for level in range(self.depth))

    @property
    def structure_tokens(self) -> int:
        """Tokens before the padding: two brackets and conslen three-token statements per scope."""
        return self.scopes * (2 + 3 * self.conslen)

    def check_length(self, length) -> int:
        if not is_int(length) or length < self.structure_tokens:
            raise ValueError(
                f"hierarchy: length = {length!r}; expected an integer of at least {self.structure_tokens} tokens, "
                f"the size of r_count = {self.r_count} scopes with depth = {self.depth}, branching = "
                f"{self.branching} and conslen = {self.conslen}"
            )
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same sequences."""
        self.check_length(length)
        if not is_int(num) or num < 0:
            raise ValueError(f"hierarchy: num = {num!r}; expected a non-negative integer")
        gen = torch.Generator().manual_seed(seed)
        statements = self.scopes * self.conslen
        draws = zip(
            torch.rand(num, statements, generator=gen, dtype=torch.float64).tolist(),  # kind
            torch.randint(self.num_variables, (num, statements), generator=gen).tolist(),
            torch.randint(self.num_values, (num, statements), generator=gen).tolist(),
            torch.rand(num, statements, generator=gen, dtype=torch.float64).tolist(),  # which visible variable
            torch.rand(num, self.scopes, self.conslen + self.branching, generator=gen)
            .argsort(dim=-1, stable=True)
            .tolist(),
        )
        tokens = torch.full((num, length), PAD, dtype=torch.int64)
        for row, row_draws in enumerate(draws):
            tokens[row, : self.structure_tokens] = torch.tensor(self._sequence(*row_draws))
        return TaskBatch(tokens, read_mask(tokens))

    def _sequence(self, kinds, variables, values, picks, orders) -> list[int]:
        """One sequence's structure from its draws, resolving every get against a stack of open scopes.

        ``orders[s]`` is a permutation of the items of scope s (in preorder): below ``conslen`` a
        statement, from ``conslen`` on a child scope (skipped at the deepest level).
        """
        ids: list[int] = []
        stack: list[dict[int, int]] = []  # one {variable: value} per open scope, innermost last
        statement, scope = iter(range(len(kinds))), iter(orders)

        def emit_scope(level: int) -> None:
            ids.append(OPEN)
            stack.append({})
            for item in next(scope):
                if item < self.conslen:
                    emit_statement(next(statement))
                elif level < self.depth:
                    emit_scope(level + 1)
            stack.pop()
            ids.append(CLOSE)

        def emit_statement(k: int) -> None:
            visible = sorted({v for frame in stack for v in frame})
            variable, value = variables[k], values[k]
            if kinds[k] < self.p_read and visible:
                op, variable = GET, visible[int(picks[k] * len(visible))]
                value = next(frame[variable] for frame in reversed(stack) if variable in frame)
            elif kinds[k] < self.p_read + self.p_set:  # a get with nothing visible becomes a set
                op = SET
                stack[-1][variable] = value
            else:
                op = MENTION
            ids.extend((op, VARIABLE0 + variable, VALUE0 + value))

        for _ in range(self.r_count):
            emit_scope(1)
        return ids

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """IID at the training length; then r_count, conslen or both doubled, each at the first length
        train_length * 2^k that holds its structure. Seeds TEST_SEED + index, shared by all runs."""
        self.check_length(train_length)
        tasks = [
            ("iid", self),
            ("ood_rcount", dataclasses.replace(self, r_count=OOD_FACTOR * self.r_count)),
            ("ood_conslen", dataclasses.replace(self, conslen=OOD_FACTOR * self.conslen)),
            (
                "ood_both",
                dataclasses.replace(self, r_count=OOD_FACTOR * self.r_count, conslen=OOD_FACTOR * self.conslen),
            ),
        ]
        splits = []
        for index, (split, task) in enumerate(tasks):
            length = train_length
            while length < task.structure_tokens:
                length *= 2
            batch = task.sample(split_sequences(sequences, train_length, length), length, TEST_SEED + index)
            splits.append(EvalSplit(split, dataclasses.asdict(task), batch, length=length))
        return splits

    def encode_text(self, line: str) -> torch.Tensor:
        return encode(line)

    def decode_text(self, tokens: torch.Tensor) -> str:
        return decode(tokens)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        return read_mask(tokens)

    def statistics(self, batch: TaskBatch) -> dict:
        return statistics(batch)


@dataclass
class Walk:
    """What a pass over one sequence found: its scopes, depth, statements and gets."""

    top_level_scopes: int = 0
    scope_statements: list[int] = field(default_factory=list)  # statements directly in each scope
    max_depth: int = 0
    structure_tokens: int = 0
    read_distances: list[int] = field(default_factory=list)  # from the assignment's value to the get's
    scope_dependent_reads: int = 0  # gets whose answer is not the variable's latest set in the sequence


def walk(ids: list[int]) -> Walk:
    """Check one sequence against the grammar and resolve its gets with a scope stack.

    ValueError (a reason and the token position) when the sequence is malformed or a get is not
    determined by the tokens before it or gives another value than the one it reads.
    """
    result = Walk()
    stack: list[tuple[int, dict[int, tuple[int, int]]]] = []  # (statements, {variable: (value, position)})
    latest: dict[int, int] = {}  # each variable's latest set anywhere, scopes ignored
    i = 0
    while i < len(ids) and ids[i] != PAD:
        token = ids[i]
        if token == OPEN:
            stack.append((0, {}))
            result.top_level_scopes += int(len(stack) == 1)
            result.max_depth = max(result.max_depth, len(stack))
        elif not stack:
            raise ValueError(f"token {i} is {_show(token)} outside any scope; expected '(' or padding '.'")
        elif token == CLOSE:
            result.scope_statements.append(stack.pop()[0])
        elif token in (SET, GET, MENTION):
            if not (
                i + 2 < len(ids) and VARIABLE0 <= ids[i + 1] < VALUE0 and VALUE0 <= ids[i + 2] < VALUE0 + MAX_VALUES
            ):
                raise ValueError(f"token {i} is {_show(token)} not followed by a variable a-z and a value 0-9")
            variable, value = ids[i + 1], ids[i + 2]
            if token == SET:
                stack[-1][1][variable] = (value, i + 2)
                latest[variable] = value
            elif token == GET:
                frame = next((frame for _, frame in reversed(stack) if variable in frame), None)
                if frame is None:
                    raise ValueError(f"token {i} gets {_show(variable)}, which no open scope assigns")
                if frame[variable][0] != value:
                    raise ValueError(
                        f"token {i} gets {_show(variable)} = {_show(value)}; the open scopes give "
                        f"{_show(frame[variable][0])}"
                    )
                result.read_distances.append(i + 2 - frame[variable][1])
                result.scope_dependent_reads += latest[variable] != value
            stack[-1] = (stack[-1][0] + 1, stack[-1][1])
            i += 2
        else:
            raise ValueError(f"token {i} is {_show(token)}; expected '(', ')' or a statement '=', '?' or '~'")
        i += 1
    result.structure_tokens = i
    if stack:
        raise ValueError(f"{len(stack)} scope(s) still open at token {i}; expected every '(' closed by ')'")
    if not result.top_level_scopes:
        raise ValueError("no scope; expected a sequence that starts with '('")
    if any(t != PAD for t in ids[i:]):
        raise ValueError(f"token {i} starts the padding but later tokens are not '.'; expected padding only at the end")
    return result


def encode(line: str) -> torch.Tensor:
    """'(=a3?a3)..' -> token ids, validating the grammar and that every get is determined."""
    text = line.strip()
    bad = sorted(set(text) - set(ALPHABET))
    if not text or bad:
        raise ValueError(
            f"hierarchy: malformed sequence {text[:40]!r}; expected a non-empty string of the characters {ALPHABET!r}"
        )
    ids = [_CHAR_TO_ID[c] for c in text]
    try:
        walk(ids)
    except ValueError as err:
        raise ValueError(f"hierarchy: malformed sequence {text[:40]!r}: {err}") from None
    return torch.tensor(ids)


def decode(tokens: torch.Tensor) -> str:
    return "".join(ALPHABET[int(t)] for t in tokens)


def statistics(batch: TaskBatch) -> dict[str, float]:
    """Structure (scopes, statements per scope, depth) and gets (count, distance, how many need scopes)."""
    n, length = batch.tokens.shape
    walks = [walk(row) for row in batch.tokens.tolist()]
    scopes = [count for w in walks for count in w.scope_statements]
    distances = [d for w in walks for d in w.read_distances]
    reads = len(distances)

    def mean(values) -> float:
        values = list(values)
        return sum(values) / len(values) if values else math.nan

    return {
        "sequences": n,
        "length": length,
        "top_level_scopes": mean(w.top_level_scopes for w in walks),
        "scopes_per_sequence": mean(len(w.scope_statements) for w in walks),
        "statements_per_scope": mean(scopes),
        "max_depth": max((w.max_depth for w in walks), default=0),
        "structure_tokens": mean(w.structure_tokens for w in walks),
        "reads_per_sequence": reads / max(n, 1),
        "read_fraction": reads / sum(scopes) if scopes else math.nan,
        "sequences_without_reads": sum(not w.read_distances for w in walks),
        "mean_read_distance": mean(distances),
        "max_read_distance": max(distances, default=math.nan),
        "scope_dependent_reads": sum(w.scope_dependent_reads for w in walks) / reads if reads else math.nan,
    }
