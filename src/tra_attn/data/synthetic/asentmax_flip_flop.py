"""The ASEntmax suite's flip-flop task: after writes and ignores, one read of the last written bit
(docs/asentmax_suite.md). Not the library's own flip-flop task (Liu et al.'s language modelling with many reads).

Follows deep-spin/asentmax at commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d: the generator ``FlipFlop`` of
scripts/generate_data.py, the data config synthetic/configs/data/flip_flop.yaml (folder
``flip-flop/10M_wprob-0_1``; ``src_pattern: "{bos_token} {text}"``, ``trg_pattern: "{text} {eos_token}"``,
``SimpleTokenizer(max_vocab_id=4)``) and the experiment synthetic/configs/experiment/entmax/flip-flop.yaml
(``loss_type: target``, TextExactMatch; project "Flip-Flop L=4 write_prob=0_1"). Their sequence is seq_len // 2
(command, bit) pairs: a write first, then writes (2) or ignores (3) with probability write_prob, 1 - write_prob,
then a read (4); bits uniform; the read's bit is left out of the source and is the target, the bit of the last
write. The loss and the exact match cover the target bit and the <eos>. Their README's example command says
``--write_prob 0.8``; the data folder and the project the experiment logs to say 0.1 (also the generator's
default): we take 0.1. Not in their code: the test range (the folder names none; we take the generator's
default 64..4096).

Grammar (ids: bits 0, 1; write 2, ignore 3, read 4; then pad 5, bos 6, eos 7, mask 8, sep 9):

    sequence := <bos> 2 b (c b){p - 2} 4 b* <eos>     exactly `length` = 2 p + 2 tokens, p = seq_len // 2
    c        := 2 (write) with probability write_prob, else 3 (ignore); b uniform in {0, 1}
    b*       := the bit after the last write

    <bos> 2 1 3 0 2 0 3 1 4 0 <eos>
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...utils.checks import in_range, is_int, option
from ..task import Task, TaskBatch, register_task
from .asentmax_layout import (
    AuthorsTests,
    Specials,
    after_first,
    check_num,
    decode_words,
    encode_words,
    longest_test_check,
    malformed,
    mean,
)

WRITE, IGNORE, READ = 2, 3, 4
SPECIALS = Specials(4)


@register_task
@dataclass(frozen=True)
class AsentmaxFlipFlop(AuthorsTests, Task):
    """ASEntmax flip-flop: writes and ignores, then one read whose bit (the last written one) is the target."""

    write_prob: float = option(
        0.1, "probability of a write among the middle commands, in (0, 1)", in_range(0.0, 1.0, low_allowed=False)
    )
    longest_test: int = option(4096, "the longest test seq_len (tests at 64, 128, ... up to it)", longest_test_check)

    name = "asentmax_flip_flop"
    vocab_size = SPECIALS.end
    authors_train_seq_len: ClassVar[tuple[int, int]] = (32, 64)  # --seq_len 48 --vary_len 16

    @property
    def specials(self) -> Specials:
        return SPECIALS

    def length_of(self, seq_len: int) -> int:
        return 2 * (seq_len // 2) + 2

    def seq_len_of(self, length: int) -> int:
        return length - 2

    def check_length(self, length) -> int:
        if not is_int(length) or length < 6 or length % 2:
            raise ValueError(
                f"{self.name}: length = {length!r}; expected 2 p + 2 tokens for p >= 2 (command, bit) pairs (<bos>, "
                f"the pairs, <eos>): an even integer >= 6, e.g. 66 for the authors' seq_len = 64"
            )
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same seed gives the same sequences."""
        self.check_length(length)
        check_num(self.name, num)
        gen = torch.Generator().manual_seed(seed)
        p = (length - 2) // 2
        bits = torch.randint(0, 2, (num, p), generator=gen)
        middle = torch.where(torch.rand(num, p - 2, generator=gen) < self.write_prob, WRITE, IGNORE)
        column = torch.zeros(num, 1, dtype=torch.long)
        commands = torch.cat([column + WRITE, middle, column + READ], dim=1)
        last_write = torch.where(commands == WRITE, torch.arange(p), 0).amax(dim=1, keepdim=True)
        bits[:, -1:] = bits.gather(1, last_write)
        pairs = torch.stack([commands, bits], dim=2).view(num, 2 * p)
        tokens = torch.cat([column + SPECIALS.bos, pairs, column + SPECIALS.eos], dim=1)
        return TaskBatch(tokens, self.loss_mask(tokens))

    def encode_text(self, line: str) -> torch.Tensor:
        """'<bos> 2 1 3 0 4 1 <eos>' -> token ids, validating the grammar and that the read gives the last write."""
        ids = encode_words(self.name, line, SPECIALS, READ + 1)
        commands, bits = ids[1:-1:2], ids[2:-1:2]
        shape = len(ids) >= 6 and len(ids) % 2 == 0 and ids[0] == SPECIALS.bos and ids[-1] == SPECIALS.eos
        shape = shape and commands[0] == WRITE and commands[-1] == READ and set(commands[1:-1]) <= {WRITE, IGNORE}
        if not shape or not set(bits) <= {0, 1}:
            raise malformed(
                self.name, line, "expected <bos>, (command, bit) pairs: a write 2 first, writes 2 or ignores 3, a "
                "read 4 last, bits 0 or 1, then <eos>"
            )  # fmt: skip
        last = max(i for i, c in enumerate(commands) if c == WRITE)
        if bits[-1] != bits[last]:
            raise malformed(
                self.name, line, f"the read gives {bits[-1]}; expected {bits[last]}, the bit of the last write"
            )
        return torch.tensor(ids)

    def decode_text(self, tokens: torch.Tensor) -> str:
        return decode_words(tokens, SPECIALS)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """True at the read's bit and the <eos>: every token after the read."""
        return after_first(tokens, READ)

    def statistics(self, batch: TaskBatch) -> dict:
        """Pairs per sequence, writes among them, and the distance from the last write to the read (in tokens)."""
        tokens = batch.tokens
        num, length = tokens.shape
        commands = tokens[:, 1:-1:2]
        p = commands.shape[1]
        last = torch.where(commands == WRITE, torch.arange(p), 0).amax(dim=1)
        return {
            "sequences": num,
            "length": length,
            "seq_len": self.seq_len_of(length),
            "writes_per_sequence": mean((commands == WRITE).sum(1)),
            "mean_read_distance": mean(2 * (p - 1 - last)),
            "max_read_distance": int(2 * (p - 1 - last).max()) if num else float("nan"),
        }
