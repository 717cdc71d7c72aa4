"""The ASEntmax suite's n-back task: the authors' source, every label the token num_steps back, lengths."""

from __future__ import annotations

import pytest
import torch

from tra_attn.data import make_task
from tra_attn.data.synthetic.asentmax_layout import training_lengths
from tra_attn.data.task import TEST_SEED
from tra_attn.training.length_spread import spread_lengths

# SimpleTokenizer(max_vocab_id=15): data 0..15, pad 16, bos 17, eos 18, mask 19, sep 20; labels y0..y15 = 21..36.
BOS, LABEL0 = 17, 21


def test_samples_follow_the_authors_generator():
    task = make_task("asentmax_nback")
    assert task.vocab_size == 37 and task.num_steps == 2
    m = 64
    batch = task.sample(300, 2 * m + 3, seed=1)
    t = batch.tokens
    assert t.shape == (300, 131) and (t[:, 0] == BOS).all()
    source, labels = t[:, 1::2], t[:, 2::2] - LABEL0
    assert source.shape == (300, m + 1) and (source[:, 0] == 0).all()
    assert source[:, 1:].min() == 1 and source[:, 1:].max() == 15  # np.random.randint(1, vocab_size)
    assert (labels[:, :2] == 0).all() and torch.equal(labels[:, 2:], source[:, :-2])
    assert torch.equal(batch.loss_mask, t >= LABEL0) and batch.loss_mask.sum(1).eq(m + 1).all()
    assert not batch.loss_mask[:, 1::2].any()  # source tokens are never scored


def test_num_steps_and_determinism():
    task = make_task("asentmax_nback", num_steps=3, num_symbols=5)
    t = task.sample(10, 21, 4).tokens
    source, labels = t[:, 1::2], t[:, 2::2] - task.label0
    assert torch.equal(labels[:, 3:], source[:, :-3]) and (labels[:, :3] == 0).all()
    assert torch.equal(t, task.sample(10, 21, 4).tokens) and not torch.equal(t, task.sample(10, 21, 5).tokens)


def test_text_round_trip_and_refusals(tmp_path):
    task = make_task("asentmax_nback")
    batch = task.sample(4, 15, 2)
    path = tmp_path / "data.txt"
    task.write_text(path, batch)
    (back,) = task.read_text(path)
    assert torch.equal(back.tokens, batch.tokens) and torch.equal(back.loss_mask, batch.loss_mask)
    assert task.encode_text("<bos> 0 y0 7 y0 3 y0 12 y7 5 y3").tolist() == [17, 0, 21, 7, 21, 3, 21, 12, 28, 5, 24]
    with pytest.raises(ValueError, match=r"asentmax_nback: malformed .*the label of source token 3 is y3; expected y7"):
        task.encode_text("<bos> 0 y0 7 y0 3 y0 12 y3 5 y3")
    with pytest.raises(ValueError, match=r"asentmax_nback: malformed .*a first source token 0"):
        task.encode_text("<bos> 4 y0 7 y0 3 y0 12 y4")
    with pytest.raises(ValueError, match=r"asentmax_nback: malformed .*unknown token 'y16'"):
        task.encode_text("<bos> 0 y16 7 y0 3 y0")


def test_eval_splits_and_the_training_range():
    task = make_task("asentmax_nback", longest_test=4096)
    splits = task.eval_splits(131, 4)
    assert [(s.params["seq_len"], s.batch.tokens.shape) for s in splits] == [  # the budget to seq_len 1024
        (64, (4, 131)), (128, (4, 259)), (256, (4, 515)), (512, (4, 1027)), (1024, (4, 2051)), (2048, (2, 4099)),
        (4096, (1, 8195))
    ]  # fmt: skip
    assert torch.equal(splits[6].batch.tokens, task.sample(1, 8195, TEST_SEED + 6).tokens)
    length, spread = training_lengths(task)
    assert length == 131 and spread_lengths(task, length, spread) == list(range(67, 132, 2))  # m = 32..64


def test_statistics():
    stats = make_task("asentmax_nback").statistics(make_task("asentmax_nback").sample(2, 131, 0))
    assert stats["seq_len"] == 64 and stats["scored_per_sequence"] == 65


@pytest.mark.parametrize(
    "args,message",
    [
        ({"num_symbols": 1}, r"num_symbols = 1; expected an integer >= 2"),
        ({"num_steps": 0}, r"num_steps = 0; expected an integer >= 1"),
        ({"num_steps": 32}, r"num_steps = 32; expected fewer than the shortest training seq_len 32"),
        ({"longest_test": "4096"}, r"longest_test = '4096'; expected an integer >= 64"),
    ],
)
def test_bad_parameters(args, message):
    with pytest.raises(ValueError, match=rf"asentmax_nback: {message}"):
        make_task("asentmax_nback", **args)


@pytest.mark.parametrize("length", [5, 7, 8, 132, 9.0])
def test_bad_length(length):
    with pytest.raises(ValueError, match=r"asentmax_nback: length = .*expected 2 m \+ 3 tokens .*odd integer >= 9"):
        make_task("asentmax_nback").sample(1, length, 0)
