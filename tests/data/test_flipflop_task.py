"""The flip-flop generator: distribution, read semantics, loss mask, text format and bad input."""

from __future__ import annotations

import pytest
import torch

from tra_attn.data import default_task, make_task
from tra_attn.data.synthetic.flipflop import (
    IGNORE,
    ONE,
    READ,
    WRITE,
    ZERO,
    FlipFlop,
    decode,
    encode,
    statistics,
)


def last_written_bits(tokens: torch.Tensor) -> list[list[int]]:
    """Reference semantics, written as a plain loop: the expected bit after every read."""
    expected = []
    for row in tokens.tolist():
        last, reads = None, []
        for instr, bit in zip(row[0::2], row[1::2]):
            if instr == WRITE:
                last = bit
            elif instr == READ:
                reads.append(last)
        expected.append(reads)
    return expected


@pytest.mark.parametrize("p", [0.8, 0.98, 0.1, 0.0])
def test_instruction_frequencies(p):
    batch = FlipFlop(p).sample(2000, 256, seed=1)
    instr = batch.tokens[:, 2::2]  # skip the forced first write
    n = instr.numel()
    for token, expected in ((WRITE, (1 - p) / 2), (READ, (1 - p) / 2), (IGNORE, p)):
        freq = (instr == token).sum().item() / n
        assert abs(freq - expected) < 4 * (expected * (1 - expected) / n) ** 0.5 + 1e-9, (token, freq, expected)


def test_reads_equal_last_write_and_bits_are_uniform():
    batch = FlipFlop(0.5).sample(300, 200, seed=2)
    reads = batch.tokens[:, 1::2][batch.tokens[:, 0::2] == READ]
    expected = [b for row in last_written_bits(batch.tokens) for b in row]
    assert reads.tolist() == expected
    written = batch.tokens[:, 1::2][batch.tokens[:, 0::2] != READ]
    assert set(written.unique().tolist()) == {ZERO, ONE}
    assert abs((written == ONE).double().mean().item() - 0.5) < 0.02


def test_first_instruction_is_write_and_final_read_is_optional():
    plain = FlipFlop(0.8).sample(500, 64, seed=3)
    assert (plain.tokens[:, 0] == WRITE).all()
    assert (plain.tokens[:, -2] != READ).any()
    forced = FlipFlop(0.8, final_read=True).sample(500, 64, seed=3)
    assert (forced.tokens[:, 0] == WRITE).all() and (forced.tokens[:, -2] == READ).all()


def test_loss_mask_marks_exactly_the_bits_after_reads():
    batch = FlipFlop(0.6).sample(50, 40, seed=4)
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        expected = [t > 0 and row[t - 1] == READ for t in range(len(row))]
        assert mask == expected


def test_same_seed_same_sequences():
    task = FlipFlop(0.8)
    assert torch.equal(task.sample(10, 32, 7).tokens, task.sample(10, 32, 7).tokens)
    assert not torch.equal(task.sample(10, 32, 7).tokens, task.sample(10, 32, 8).tokens)


def test_statistics_show_long_gaps_in_the_sparse_split():
    iid = statistics(FlipFlop(0.8, final_read=True).sample(500, 128, 0))
    sparse = statistics(FlipFlop(0.98, final_read=True).sample(500, 128, 0))
    assert sparse["mean_gap"] > 3 * iid["mean_gap"]
    assert sparse["sequences_without_reads"] == 0


def test_text_round_trip(tmp_path):
    batch = FlipFlop(0.8, final_read=True).sample(20, 30, seed=5)
    path = tmp_path / "ff.txt"
    FlipFlop().write_text(path, batch)
    lines = path.read_text().splitlines()
    assert len(lines) == 20 and all(len(line) == 30 for line in lines)
    assert lines[0] == decode(batch.tokens[0])
    (loaded,) = FlipFlop().read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)


def test_read_text_groups_lengths(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_text("w1r1\nw0i1r0i1\nw1i0\n")
    batches = FlipFlop().read_text(path)
    assert [b.tokens.shape for b in batches] == [(2, 4), (1, 8)]


@pytest.mark.parametrize(
    "text,pattern",
    [
        ("w1r", r"malformed sequence 'w1r'"),
        ("w1x0", r"malformed sequence"),
        ("r1w1", r"starts with 'r'; expected a write"),
        ("w11w", r"expected instruction/bit pairs"),
    ],
)
def test_encode_rejects_malformed_lines(text, pattern):
    with pytest.raises(ValueError, match=pattern):
        encode(text)


def test_read_text_rejects_bad_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        FlipFlop().read_text(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="is empty"):
        FlipFlop().read_text(empty)
    bad = tmp_path / "bad.txt"
    bad.write_text("w1r1\nw1q1\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: flip-flop: malformed"):
        FlipFlop().read_text(bad)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, "0.8"])
def test_bad_p_ignore(p):
    with pytest.raises(ValueError, match=r"p_ignore = .*expected a probability in \[0, 1\)"):
        FlipFlop(p)


@pytest.mark.parametrize("length", [0, -4, 7, 12.0])
def test_bad_length(length):
    with pytest.raises(ValueError, match=r"length = .*expected a positive even number of tokens"):
        FlipFlop().sample(3, length, 0)


def test_task_registry():
    assert isinstance(make_task("flipflop", p_ignore=0.5), FlipFlop)
    assert default_task() == "flipflop"  # `tra train` without --task, whatever registers first
    expected = (
        r"\['asentmax_copy', 'asentmax_flip_flop', 'asentmax_local_count', 'asentmax_mqmtar', 'asentmax_nback', "
        r"'asentmax_reverse', 'asentmax_sort', 'flipflop', 'hierarchy', 'lm', 'majority', 'mqar', 'passkey', "
        r"'ruler_common_words', 'ruler_frequent_words', 'ruler_niah_multikey', 'ruler_niah_multiquery', "
        r"'ruler_niah_multivalue', 'ruler_niah_single', 'ruler_variable_tracking', 'selective_copy'\]"
    )
    with pytest.raises(ValueError, match=rf"task = 'copy'; expected one of {expected}"):
        make_task("copy")
