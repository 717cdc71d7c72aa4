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
from pathlib import Path

import torch

CHARS = "wri01"
PAD, WRITE, READ, IGNORE, ZERO, ONE = range(6)
VOCAB_SIZE = 6
_CHAR_TO_ID = {c: i + 1 for i, c in enumerate(CHARS)}
_ID_TO_CHAR = {i: c for c, i in _CHAR_TO_ID.items()}


@dataclass
class TaskBatch:
    """tokens (N, L) int64 and loss_mask (N, L) bool: True at the tokens that are scored (read bits)."""

    tokens: torch.Tensor
    loss_mask: torch.Tensor


def check_p_ignore(p_ignore) -> float:
    if not isinstance(p_ignore, (int, float)) or isinstance(p_ignore, bool) or not 0.0 <= p_ignore < 1.0:
        raise ValueError(f"flip-flop: p_ignore = {p_ignore!r}; expected a probability in [0, 1)")
    return float(p_ignore)


def check_length(length) -> int:
    if not isinstance(length, int) or isinstance(length, bool) or length <= 0 or length % 2:
        raise ValueError(f"flip-flop: length = {length!r}; expected a positive even number of tokens")
    return length


def read_mask(tokens: torch.Tensor) -> torch.Tensor:
    """True at every bit that follows a read instruction."""
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 1:] = tokens[:, :-1] == READ
    return mask


@dataclass(frozen=True)
class FlipFlop:
    """The FFL(p_ignore) distribution over sequences of any even length."""

    p_ignore: float = 0.8
    final_read: bool = False

    vocab_size = VOCAB_SIZE

    def __post_init__(self):
        check_p_ignore(self.p_ignore)

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


def encode(line: str) -> torch.Tensor:
    """'w1i0r1' -> token ids, validating the format: (instruction, bit) pairs that start with a write."""
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
    return torch.tensor([_CHAR_TO_ID[c] for c in text])


def decode(tokens: torch.Tensor) -> str:
    return "".join(_ID_TO_CHAR[int(t)] for t in tokens)


def write_text(path: str | Path, batch: TaskBatch) -> None:
    """One sequence per line ('w1i0r1...'), written atomically."""
    from ..utils.atomic import atomic_write_text

    atomic_write_text(path, "".join(decode(row) + "\n" for row in batch.tokens))


def read_text(path: str | Path) -> list[TaskBatch]:
    """Sequences from a text file, grouped into one batch per sequence length."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"flip-flop: data file {path} does not exist")
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"flip-flop: data file {path} is empty; expected one sequence per line")
    by_length: dict[int, list[torch.Tensor]] = {}
    for number, line in enumerate(lines, 1):
        try:
            tokens = encode(line)
        except ValueError as err:
            raise ValueError(f"{path}:{number}: {err}") from None
        by_length.setdefault(len(tokens), []).append(tokens)
    batches = []
    for length in sorted(by_length):
        tokens = torch.stack(by_length[length])
        batches.append(TaskBatch(tokens, read_mask(tokens)))
    return batches


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
