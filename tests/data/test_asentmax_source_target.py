"""The ASEntmax suite's copy, reverse and sort tasks: the authors' ids, layout, scoring and lengths."""

from __future__ import annotations

import pytest
import torch

from tra_attn.data import make_task
from tra_attn.data.synthetic.asentmax_layout import training_lengths
from tra_attn.data.task import TEST_SEED
from tra_attn.training.length_spread import spread_batch, spread_lengths

NAMES = ["asentmax_copy", "asentmax_reverse", "asentmax_sort"]
TARGET = {
    "asentmax_copy": lambda s: s,
    "asentmax_reverse": lambda s: s.flip(1),
    "asentmax_sort": lambda s: s.sort(dim=1).values,
}
# SimpleTokenizer(max_vocab_id=31): data 0..31, then pad 32, bos 33, eos 34, mask 35, sep 36.
PAD, BOS, EOS, MASK, SEP = 32, 33, 34, 35, 36


@pytest.mark.parametrize("name", NAMES)
def test_samples_follow_the_authors_layout(name):
    task = make_task(name)
    assert task.vocab_size == 37
    n = 64
    batch = task.sample(200, 2 * n + 3, seed=1)
    t = batch.tokens
    assert t.shape == (200, 131)
    assert (t[:, 0] == BOS).all() and (t[:, n + 1] == SEP).all() and (t[:, -1] == EOS).all()
    source, target = t[:, 1 : n + 1], t[:, n + 2 : -1]
    assert source.min() == 0 and source.max() == 31  # the whole vocabulary, uniform
    assert abs(source.double().mean().item() - 15.5) < 0.3
    assert torch.equal(target, TARGET[name](source))
    expected = torch.zeros_like(t, dtype=torch.bool)
    expected[:, n + 2 :] = True  # the target and the <eos>, as their SourceTargetProcessor's target_mask
    assert torch.equal(batch.loss_mask, expected)
    assert torch.equal(task.loss_mask(t), expected)


@pytest.mark.parametrize("name", NAMES)
def test_samples_are_a_function_of_the_seed(name):
    task = make_task(name)
    a, b, c = task.sample(4, 21, 7), task.sample(4, 21, 7), task.sample(4, 21, 8)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


@pytest.mark.parametrize("name", NAMES)
def test_text_round_trip_and_refusals(name, tmp_path):
    task = make_task(name, num_symbols=8)
    batch = task.sample(5, 15, 3)
    path = tmp_path / "data.txt"
    task.write_text(path, batch)
    line = path.read_text().splitlines()[0]
    assert line.startswith("<bos> ") and " <sep> " in line and line.endswith(" <eos>")
    (back,) = task.read_text(path)
    assert torch.equal(back.tokens, batch.tokens) and torch.equal(back.loss_mask, batch.loss_mask)
    # num_symbols = 8: pad 8, bos 9, eos 10, mask 11, sep 12
    assert task.decode_text(torch.tensor([9, 1, 2, 12, 1, 2, 10])) == "<bos> 1 2 <sep> 1 2 <eos>"
    with pytest.raises(ValueError, match=rf"{name}: malformed sequence .*unknown token '8'"):
        task.encode_text("<bos> 8 <sep> 8 <eos>")
    with pytest.raises(ValueError, match=rf"{name}: malformed sequence .*expected <bos>, n data tokens, <sep>"):
        task.encode_text("<bos> 1 2 <sep> 1 <eos>")
    wrong = "<bos> 1 2 3 <sep> 3 3 3 <eos>"
    with pytest.raises(ValueError, match=rf"{name}: malformed sequence .*the target is not"):
        task.encode_text(wrong)


def test_reverse_and_sort_targets_on_a_known_line():
    assert make_task("asentmax_reverse").encode_text("<bos> 1 2 3 <sep> 3 2 1 <eos>").tolist()[-4:-1] == [3, 2, 1]
    assert make_task("asentmax_sort").encode_text("<bos> 3 1 3 <sep> 1 3 3 <eos>").tolist()[-4:-1] == [1, 3, 3]


@pytest.mark.parametrize("name", NAMES)
def test_eval_splits_are_the_authors_test_lengths(name):
    task = make_task(name, longest_test=512)
    splits = task.eval_splits(131, 8)
    assert [s.params["seq_len"] for s in splits] == [64, 128, 256, 512]
    assert [s.batch.tokens.shape for s in splits] == [(8, 131), (8, 259), (8, 515), (8, 1027)]  # all to seq_len 1024
    assert {s.split for s in splits} == {"test"}
    assert torch.equal(splits[1].batch.tokens, task.sample(8, 259, TEST_SEED + 1).tokens)
    assert make_task(name).longest_test == (512 if name == "asentmax_reverse" else 4096)


@pytest.mark.parametrize("name", NAMES)
def test_the_authors_training_range_is_a_length_spread(name):
    task = make_task(name)
    length, spread = training_lengths(task)
    assert length == 131
    assert spread_lengths(task, length, spread) == list(range(67, 132, 2))  # n = 32..64, every one
    rows = spread_batch(task, 64, length, 5, spread)
    docs = rows.model_args["segment_ids"]
    assert (docs.max(dim=1).values == 0).all()  # one document per row, its tail padding
    ns = ((docs == 0).sum(1) - 3) // 2
    assert ns.min() >= 32 and ns.max() <= 64


def test_statistics():
    task = make_task("asentmax_copy")
    stats = task.statistics(task.sample(3, 131, 0))
    assert stats["seq_len"] == 64 and stats["scored_per_sequence"] == 65 and stats["sequences"] == 3


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "args,message",
    [
        ({"num_symbols": 1}, r"num_symbols = 1; expected an integer >= 2"),
        ({"num_symbols": 4.0}, r"num_symbols = 4\.0; expected an integer >= 2"),
        ({"longest_test": 32}, r"longest_test = 32; expected an integer >= 64"),
    ],
)
def test_bad_parameters(name, args, message):
    with pytest.raises(ValueError, match=rf"{name}: {message}"):
        make_task(name, **args)


@pytest.mark.parametrize("length", [0, 3, 4, 130, 131.0, True])
def test_bad_length(length):
    with pytest.raises(ValueError, match=r"asentmax_copy: length = .*expected 2 n \+ 3 tokens"):
        make_task("asentmax_copy").sample(2, length, 0)


def test_bad_num():
    with pytest.raises(ValueError, match=r"asentmax_sort: num = -1; expected a non-negative integer"):
        make_task("asentmax_sort").sample(-1, 9, 0)
