"""The ASEntmax suite's local count task: blocks of repeats, the count asked at the end, lengths."""

from __future__ import annotations

import pytest
import torch

from tra_attn.data import make_task
from tra_attn.data.synthetic.asentmax_layout import training_lengths
from tra_attn.data.synthetic.asentmax_local_count import run_counts
from tra_attn.data.task import TEST_SEED
from tra_attn.training.length_spread import spread_lengths

# SimpleTokenizer(max_vocab_id=15): data 0..15, pad 16, bos 17, eos 18, mask 19, sep 20; counts y0..y47 = 21..68.
BOS, SEP, LABEL0 = 17, 20, 21


def blocks(source: torch.Tensor) -> list[list[tuple[int, int]]]:
    """(symbol, length) of every block of every row."""
    out = []
    for row in source.tolist():
        runs = []
        for t in row:
            if runs and runs[-1][0] == t:
                runs[-1] = (t, runs[-1][1] + 1)
            else:
                runs.append((t, 1))
        out.append(runs)
    return out


def test_samples_follow_the_authors_blocks_and_ask_the_last_count():
    task = make_task("asentmax_local_count")
    assert task.vocab_size == 16 + 5 + 48
    batch = task.sample(300, 131, seed=1)
    t = batch.tokens
    assert t.shape == (300, 131) and (t[:, 0] == BOS).all() and (t[:, -2] == SEP).all()
    source = t[:, 1:-2]
    assert source.min() == 0 and source.max() == 15
    rows = blocks(source)
    inner = [length for runs in rows for _, length in runs[:-1]]  # every block but the cut last one
    assert min(inner) == 2 and max(inner) == 48  # uniform in 2..max_reps
    assert abs(sum(inner) / len(inner) - 25) < 2
    assert all(runs[-1][1] <= 48 for runs in rows)
    assert torch.equal(t[:, -1] - LABEL0, torch.tensor([runs[-1][1] - 1 for runs in rows]))  # 0-based
    expected = torch.zeros_like(t, dtype=torch.bool)
    expected[:, -1] = True
    assert torch.equal(batch.loss_mask, expected) and torch.equal(task.loss_mask(t), expected)


def test_run_counts_are_the_authors_labels():
    # generate_data.py LocalCount: counts 1..reps per block, minus 1.
    assert run_counts(torch.tensor([[3, 3, 3, 9, 9, 0, 0, 0, 0]])).tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]


def test_determinism_and_round_trip(tmp_path):
    task = make_task("asentmax_local_count", max_reps=5, num_symbols=4)
    batch = task.sample(6, 30, 3)
    assert torch.equal(batch.tokens, task.sample(6, 30, 3).tokens)
    assert not torch.equal(batch.tokens, task.sample(6, 30, 4).tokens)
    path = tmp_path / "data.txt"
    task.write_text(path, batch)
    (back,) = task.read_text(path)
    assert torch.equal(back.tokens, batch.tokens) and torch.equal(back.loss_mask, batch.loss_mask)
    assert task.encode_text("<bos> 3 3 3 1 1 0 0 0 <sep> y2").tolist()[-1] == task.label0 + 2
    with pytest.raises(ValueError, match=r"asentmax_local_count: malformed .*the count is y1; expected y2"):
        task.encode_text("<bos> 3 3 3 1 1 0 0 0 <sep> y1")
    with pytest.raises(ValueError, match=r"asentmax_local_count: malformed .*longer than max_reps = 5"):
        task.encode_text("<bos> 3 3 3 3 3 3 <sep> y4")
    with pytest.raises(ValueError, match=r"asentmax_local_count: malformed .*expected <bos>, source tokens, <sep>"):
        task.encode_text("<bos> 3 3 y1 <sep>")


def test_eval_splits_and_the_training_range():
    task = make_task("asentmax_local_count", longest_test=4096)
    splits = task.eval_splits(131, 4)
    assert [(s.params["seq_len"], s.batch.tokens.shape) for s in splits] == [  # the budget to seq_len 1024
        (64, (4, 67)), (128, (4, 131)), (256, (4, 259)), (512, (4, 515)), (1024, (4, 1027)), (2048, (2, 2051)),
        (4096, (1, 4099))
    ]  # fmt: skip
    assert torch.equal(splits[1].batch.tokens, task.sample(4, 131, TEST_SEED + 1).tokens)
    length, spread = training_lengths(task)
    assert length == 131 and spread_lengths(task, length, spread) == list(range(67, 132))  # n = 64..128


def test_statistics():
    task = make_task("asentmax_local_count")
    stats = task.statistics(task.sample(50, 131, 0))
    assert stats["seq_len"] == 128 and 2 < stats["blocks_per_sequence"] < 20 and 0 <= stats["mean_count"] < 48


@pytest.mark.parametrize(
    "args,message",
    [
        ({"num_symbols": 1}, r"num_symbols = 1; expected an integer >= 2"),
        ({"max_reps": 1}, r"max_reps = 1; expected an integer >= 2"),
        ({"longest_test": 63}, r"longest_test = 63; expected an integer >= 64"),
    ],
)
def test_bad_parameters(args, message):
    with pytest.raises(ValueError, match=rf"asentmax_local_count: {message}"):
        make_task("asentmax_local_count", **args)


@pytest.mark.parametrize("length", [0, 3, 10.0, False])
def test_bad_length(length):
    with pytest.raises(ValueError, match=r"asentmax_local_count: length = .*expected n \+ 3 tokens"):
        make_task("asentmax_local_count").sample(1, length, 0)
