"""The ASEntmax suite's flip-flop task: writes and ignores, one read of the last write, lengths."""

from __future__ import annotations

import pytest
import torch

from tra_attn.data import make_task
from tra_attn.data.synthetic.asentmax_layout import training_lengths
from tra_attn.data.task import TEST_SEED
from tra_attn.training.length_spread import spread_lengths

# SimpleTokenizer(max_vocab_id=4): bits 0, 1; write 2, ignore 3, read 4; pad 5, bos 6, eos 7, mask 8, sep 9.
WRITE, IGNORE, READ, BOS, EOS = 2, 3, 4, 6, 7


def test_samples_follow_the_authors_generator():
    task = make_task("asentmax_flip_flop")
    assert task.vocab_size == 10 and task.write_prob == 0.1
    batch = task.sample(2000, 66, seed=1)
    t = batch.tokens
    assert t.shape == (2000, 66) and (t[:, 0] == BOS).all() and (t[:, -1] == EOS).all()
    commands, bits = t[:, 1:-1:2], t[:, 2:-1:2]
    assert commands.shape == (2000, 32)  # seq_len 64: 32 pairs
    assert (commands[:, 0] == WRITE).all() and (commands[:, -1] == READ).all()
    middle = commands[:, 1:-1]
    assert set(middle.unique().tolist()) == {WRITE, IGNORE}
    assert abs((middle == WRITE).double().mean().item() - 0.1) < 0.01
    assert set(bits.unique().tolist()) == {0, 1}
    for row in range(50):
        last = max(i for i, c in enumerate(commands[row].tolist()) if c == WRITE)
        assert bits[row, -1] == bits[row, last]
    expected = torch.zeros_like(t, dtype=torch.bool)
    expected[:, -2:] = True  # the read's bit and the <eos>: their target "{text} {eos_token}"
    assert torch.equal(batch.loss_mask, expected) and torch.equal(task.loss_mask(t), expected)


def test_determinism_and_round_trip(tmp_path):
    task = make_task("asentmax_flip_flop", write_prob=0.5)
    batch = task.sample(5, 12, 3)
    assert torch.equal(batch.tokens, task.sample(5, 12, 3).tokens)
    assert not torch.equal(batch.tokens, task.sample(5, 12, 4).tokens)
    path = tmp_path / "data.txt"
    task.write_text(path, batch)
    (back,) = task.read_text(path)
    assert torch.equal(back.tokens, batch.tokens) and torch.equal(back.loss_mask, batch.loss_mask)
    assert task.encode_text("<bos> 2 1 3 0 2 0 3 1 4 0 <eos>").tolist() == [6, 2, 1, 3, 0, 2, 0, 3, 1, 4, 0, 7]
    with pytest.raises(ValueError, match=r"asentmax_flip_flop: malformed .*the read gives 1; expected 0"):
        task.encode_text("<bos> 2 1 3 0 2 0 3 1 4 1 <eos>")
    with pytest.raises(ValueError, match=r"asentmax_flip_flop: malformed .*a write 2 first"):
        task.encode_text("<bos> 3 1 2 0 4 0 <eos>")
    with pytest.raises(ValueError, match=r"asentmax_flip_flop: malformed .*unknown token '5'"):
        task.encode_text("<bos> 2 5 4 0 <eos>")


def test_eval_splits_and_the_training_range():
    task = make_task("asentmax_flip_flop", longest_test=4096)
    splits = task.eval_splits(66, 4)
    assert [(s.params["seq_len"], s.batch.tokens.shape) for s in splits] == [  # the budget to seq_len 1024
        (64, (4, 66)), (128, (4, 130)), (256, (4, 258)), (512, (4, 514)), (1024, (4, 1026)), (2048, (2, 2050)),
        (4096, (1, 4098))
    ]  # fmt: skip
    assert torch.equal(splits[1].batch.tokens, task.sample(4, 130, TEST_SEED + 1).tokens)
    length, spread = training_lengths(task)
    assert length == 66 and spread_lengths(task, length, spread) == list(range(34, 67, 2))  # 16..32 pairs


def test_statistics():
    task = make_task("asentmax_flip_flop")
    stats = task.statistics(task.sample(100, 66, 0))
    assert stats["seq_len"] == 64 and 1 <= stats["writes_per_sequence"] < 8 and stats["max_read_distance"] <= 62


@pytest.mark.parametrize("p", [0, 1, 1.5, -0.1, "0.1", True])
def test_bad_write_prob(p):
    with pytest.raises(ValueError, match=r"asentmax_flip_flop: write_prob = .*expected a number in \(0, 1\)"):
        make_task("asentmax_flip_flop", write_prob=p)


@pytest.mark.parametrize("length", [4, 7, 65, 66.0])
def test_bad_length(length):
    with pytest.raises(ValueError, match=r"asentmax_flip_flop: length = .*expected 2 p \+ 2 tokens"):
        make_task("asentmax_flip_flop").sample(1, length, 0)


def test_bad_longest_test():
    with pytest.raises(ValueError, match=r"asentmax_flip_flop: longest_test = 0; expected an integer >= 64"):
        make_task("asentmax_flip_flop", longest_test=0)
