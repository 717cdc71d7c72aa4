"""Flip-flop language modelling (Liu et al. 2023, arXiv 2306.00946), generated procedurally.

A sequence is L/2 (instruction, bit) pairs. Instructions are drawn i.i.d.: ignore with probability
p, write and read with (1 - p) / 2 each. The bit after a write or an ignore is uniform; the bit
after a read equals the most recently written bit. The first instruction is always a write;
optionally the last is forced to be a read. Only the bits after reads are predictable, so the loss
and the metrics look only at them. FFL(0.8) is the training distribution; FFL(0.98) (sparse: long
write-to-read gaps) and FFL(0.1) (dense: many writes and reads) are the out-of-distribution tests.

Token ids follow the TRA authors' notebook: [PAD]=0, w=1, r=2, i=3, '0'=4, '1'=5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...utils.checks import boolean, check_declared, in_range, is_int, option
from ..task import TEST_SEED, EvalSplit, Task, TaskBatch, register_task, split_sequences

CHARS = "wri01"
PAD, WRITE, READ, IGNORE, ZERO, ONE = range(6)
VOCAB_SIZE = 6
_CHAR_TO_ID = {c: i + 1 for i, c in enumerate(CHARS)}
_ID_TO_CHAR = {i: c for c, i in _CHAR_TO_ID.items()}
ROLES = ("latest write", "older write", "ignore", "other read", "the read")  # key_roles


def check_length(length) -> int:
    if not is_int(length) or length <= 0 or length % 2:
        raise ValueError(f"flip-flop: length = {length!r}; expected a positive even number of tokens")
    return length


def read_mask(tokens: torch.Tensor) -> torch.Tensor:
    """True at every bit that follows a read instruction."""
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 1:] = tokens[:, :-1] == READ
    return mask


def split_params(length: int) -> list[tuple[str, float, int]]:
    """(split, p_ignore, length) of the test sets for a model trained on ``length``-token FFL(0.8).

    IID FFL(0.8), sparse FFL(0.98) and dense FFL(0.1) at the training length, IID at 2x, 4x and 8x,
    and sparse at 8x, where write-to-read gaps run far beyond anything seen in training. New splits
    go at the end, so that every split keeps its seed.
    """
    return (
        [("iid", 0.8, length), ("sparse", 0.98, length), ("dense", 0.1, length)]
        + [("iid", 0.8, factor * length) for factor in (2, 4, 8)]
        + [("sparse", 0.98, 8 * length)]
    )


@register_task
@dataclass(frozen=True)
class FlipFlop(Task):
    """The FFL(p_ignore) distribution over sequences of any even length."""

    p_ignore: float = option(0.8, "probability of an ignore instruction", in_range(0.0, 1.0, what="a probability"))
    final_read: bool = option(False, "force the last instruction to be a read", boolean)

    name = "flipflop"
    is_default = True  # the paper's task: what `tra train` trains on unless told otherwise
    vocab_size = VOCAB_SIZE

    def __post_init__(self):
        check_declared(self, prefix="flip-flop: ")  # the task's messages say "flip-flop", not its name

    def check_length(self, length) -> int:
        return check_length(length)

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same sequences."""
        check_length(length)
        if not isinstance(num, int) or num < 0:
            raise ValueError(f"flip-flop: num = {num!r}; expected a non-negative integer")
        gen = torch.Generator().manual_seed(seed)
        pairs = length // 2
        p_write = (1.0 - self.p_ignore) / 2
        probs = torch.tensor([p_write, p_write, self.p_ignore])  # write, read, ignore
        instr = torch.multinomial(probs, num * pairs, replacement=True, generator=gen).view(num, pairs) + WRITE
        instr[:, 0] = WRITE
        if self.final_read and pairs > 1:
            instr[:, -1] = READ
        bits = torch.randint(0, 2, (num, pairs), generator=gen)
        # Each read copies the bit of the most recent write (the first pair is always a write).
        pair_index = torch.arange(pairs).expand(num, pairs)
        last_write = torch.where(instr == WRITE, pair_index, 0).cummax(dim=1).values
        bits = torch.where(instr == READ, bits.gather(1, last_write), bits)
        tokens = torch.stack([instr, bits + ZERO], dim=2).view(num, length)
        return TaskBatch(tokens, read_mask(tokens))

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """Every split of ``split_params``; each sequence ends with a read, seeds shared by all runs."""
        return [
            EvalSplit(
                split,
                {"p_ignore": p},
                FlipFlop(p, final_read=True).sample(
                    split_sequences(sequences, train_length, length), length, TEST_SEED + index
                ),
            )
            for index, (split, p, length) in enumerate(split_params(train_length))
        ]

    def encode_text(self, line: str) -> torch.Tensor:
        return encode(line)

    def decode_text(self, tokens: torch.Tensor) -> str:
        return decode(tokens)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        return read_mask(tokens)

    def statistics(self, batch: TaskBatch) -> dict:
        return statistics(batch)

    def key_roles(self, tokens: torch.Tensor) -> tuple[tuple[str, ...], torch.Tensor]:
        """Per read (row i: the read instruction): the latest write before it (instruction and bit), older
        writes, ignores, other reads (instructions and bits), and the read itself."""
        n, length = tokens.shape
        instruction = torch.zeros_like(tokens)  # each token's instruction: its own, or the one before its bit
        instruction[:, 0::2] = tokens[:, 0::2]
        instruction[:, 1::2] = tokens[:, 0::2]
        kind = {WRITE: "older write", IGNORE: "ignore", READ: "other read", PAD: "other read"}
        by_key = torch.full_like(tokens, ROLES.index("other read"))
        for token, role in kind.items():
            by_key[instruction == token] = ROLES.index(role)
        roles = by_key[:, None, :].expand(n, length, length).clone()
        pos = torch.arange(length)
        writes = torch.where(tokens == WRITE, pos, -1)  # the position of each write instruction, else -1
        latest = writes.cummax(dim=1).values  # the latest write at or before each position
        for offset in (0, 1):  # the latest write's instruction and its bit, for the query at each position
            hit = (pos[None, None, :] == (latest[:, :, None] + offset)) & (latest[:, :, None] >= 0)
            roles[hit] = ROLES.index("latest write")
        roles[:, pos, pos] = ROLES.index("the read")
        return ROLES, roles


def encode(line: str) -> torch.Tensor:
    """'w1i0r1' -> token ids, validating the format ((instruction, bit) pairs that start with a write) and
    that every read gives the last written bit."""
    text = line.strip()
    bad = sorted(set(text) - set(CHARS))
    if not text or bad or len(text) % 2:
        raise ValueError(
            f"flip-flop: malformed sequence {text[:40]!r}; expected an even-length string of "
            f"(instruction in 'wri', bit in '01') pairs"
        )
    instructions, bits = text[0::2], text[1::2]
    if set(instructions) - set("wri") or set(bits) - set("01"):
        raise ValueError(f"flip-flop: malformed sequence {text[:40]!r}; expected instruction/bit pairs")
    if instructions[0] != "w":
        raise ValueError(f"flip-flop: sequence {text[:40]!r} starts with {instructions[0]!r}; expected a write 'w'")
    check_reads(text)
    return torch.tensor([_CHAR_TO_ID[c] for c in text])


def check_reads(text: str) -> None:
    """A ValueError at the first read whose bit is not the most recently written one: the task's answers
    are determined, and a file that contradicts them would score a model against wrong labels."""
    written = None
    for position in range(0, len(text), 2):
        instruction, bit = text[position], text[position + 1]
        if instruction == "w":
            written, write_position = bit, position
        elif instruction == "r" and bit != written:
            raise ValueError(
                f"flip-flop: sequence {text[:40]!r}: the read at token {position} gives {bit!r}; expected "
                f"{written!r}, the bit written at token {write_position}"
            )


def decode(tokens: torch.Tensor) -> str:
    return "".join(_ID_TO_CHAR[int(t)] for t in tokens)


def statistics(batch: TaskBatch) -> dict[str, float]:
    """Reads per sequence and write-to-read gaps (in tokens): is a split really long-range?"""
    tokens = batch.tokens
    n, length = tokens.shape
    pos = torch.arange(length).expand(n, length)
    last_write = torch.where(tokens == WRITE, pos, -1).cummax(dim=1).values
    reads = tokens == READ
    gaps = (pos - last_write)[reads].double()
    return {
        "sequences": n,
        "length": length,
        "reads_per_sequence": reads.sum().item() / max(n, 1),
        "sequences_without_reads": int((reads.sum(1) == 0).sum()),
        "mean_gap": gaps.mean().item() if gaps.numel() else math.nan,
        "max_gap": gaps.max().item() if gaps.numel() else math.nan,
    }
