"""The ASEntmax suite's MQMTAR: the authors' rows of pairs among spaces, queries, answers, lengths."""

from __future__ import annotations

import pytest
import torch

from tra_attn.data import make_task
from tra_attn.data.synthetic.asentmax_layout import training_lengths
from tra_attn.data.synthetic.asentmax_mqmtar import TRAIN_VOCABULARY_SEED
from tra_attn.data.task import TEST_SEED
from tra_attn.training.length_spread import spread_lengths

# SimpleTokenizer(max_vocab_id=259): space 0, kv separator 1, query separator 2, alphabet 3..258 (259 unused);
# pad 260, bos 261, eos 262, mask 263, sep 264.
BOS, EOS, SEP = 261, 262, 264


def parse(row: list[int], width: int, pairs: int):
    """The pairs {key: value} of a row, its queried keys and its answers."""
    body = row[1 : 1 + pairs * width]
    bound = {}
    for r in range(pairs):
        unit = body[r * width : (r + 1) * width]
        i = unit.index(1)
        assert unit[: i - 2] == [0] * (i - 2) and unit[i + 3 :] == [0] * (width - i - 3)  # spaces around the pair
        bound[tuple(unit[i - 2 : i])] = tuple(unit[i + 1 : i + 3])
    rest = row[1 + pairs * width :]
    queries, answers = rest[:12], rest[13:25]
    return bound, [tuple(queries[3 * j + 1 : 3 * j + 3]) for j in range(4)], [tuple(answers[3 * j + 1 : 3 * j + 3])
                                                                           for j in range(4)]  # fmt: skip


@pytest.mark.parametrize("seq_len,pairs,width", [(64, 8, 8), (128, 17, 7)])
def test_samples_follow_the_authors_generator(seq_len, pairs, width):
    task = make_task("asentmax_mqmtar")
    assert task.vocab_size == 265 and task.layout(seq_len) == (pairs, width)
    length = task.length_of(seq_len)
    assert length == 3 + pairs * width + 4 * 3 + 4 * 3
    batch = task.sample(50, length, seed=1)
    t = batch.tokens
    assert t.shape == (50, length) and (t[:, 0] == BOS).all() and (t[:, -1] == EOS).all()
    assert (t[:, -14] == SEP).all()
    for row in t.tolist():
        bound, queries, answers = parse(row, width, pairs)
        assert len(bound) == pairs and len(set(bound.values())) == pairs  # keys distinct, values distinct
        assert all(3 <= x <= 258 for pair in bound.items() for word in pair for x in word)
        assert [bound[q] for q in queries] == answers
        assert [row[1 + pairs * width + 3 * j] for j in range(4)] == [2] * 4
    expected = torch.zeros_like(t, dtype=torch.bool)
    expected[:, -13:] = True  # the answers (2 and the value, per query) and the <eos>
    assert torch.equal(batch.loss_mask, expected) and torch.equal(task.loss_mask(t), expected)


def test_the_pair_sits_anywhere_in_its_row():
    task = make_task("asentmax_mqmtar")
    t = task.sample(200, task.length_of(128), seed=2).tokens
    body = t[:, 1 : 1 + 17 * 7].reshape(-1, 7)
    offsets = (body == 1).float().argmax(dim=1) - 2
    assert set(offsets.tolist()) == {0, 1}  # one spare space, left or right of the pair


def test_determinism_and_round_trip(tmp_path):
    task = make_task("asentmax_mqmtar", abc_size=8, num_words=20)
    length = task.length_of(64)
    batch = task.sample(4, length, 3)
    assert torch.equal(batch.tokens, task.sample(4, length, 3).tokens)
    assert not torch.equal(batch.tokens, task.sample(4, length, 4).tokens)
    path = tmp_path / "data.txt"
    task.write_text(path, batch)
    (back,) = task.read_text(path)
    assert torch.equal(back.tokens, batch.tokens) and torch.equal(back.loss_mask, batch.loss_mask)
    line = task.decode_text(batch.tokens[0])
    words = line.split()
    words[-2] = "3" if words[-2] != "3" else "4"  # the last answer's last token
    with pytest.raises(ValueError, match=r"asentmax_mqmtar: malformed .*query 3 is answered"):
        task.encode_text(" ".join(words))
    with pytest.raises(ValueError, match=r"asentmax_mqmtar: malformed .*expected <bos>, the pairs, 4 queries"):
        task.encode_text(line.replace("<sep>", "0"))


def test_eval_splits_and_the_training_range():
    task = make_task("asentmax_mqmtar", longest_test=4096)
    splits = task.eval_splits(91, 4)
    assert [(s.params["seq_len"], s.batch.tokens.shape) for s in splits] == [  # the budget to seq_len 1024
        (64, (4, 91)), (128, (4, 146)), (256, (4, 265)), (512, (4, 503)), (1024, (4, 979)), (2048, (2, 1938)),
        (4096, (1, 3849))
    ]  # fmt: skip
    assert torch.equal(splits[1].batch.tokens, task.test_sample(4, 146, TEST_SEED + 1).tokens)
    for s in [64 * 2**k for k in range(11)]:  # up to 65536: a test length builds the authors' own layout
        assert task.layout(task.seq_len_of(task.length_of(s))) == task.layout(s)
    length, spread = training_lengths(task)
    assert length == 91 and spread_lengths(task, length, spread) == [59, 62, 63, 67, 69, 75, 76, 83, 90, 91]


def keys_of(tokens: torch.Tensor) -> set[tuple[int, int]]:
    """The keys bound in the rows: the two tokens before each key-value separator (1)."""
    rows = tokens.tolist()
    return {tuple(row[i - 2 : i]) for row in rows for i, t in enumerate(row) if t == 1}


def test_training_reads_one_vocabulary_and_each_test_split_its_own():
    """As the authors' files: every training sample (any seed, any run) draws from one vocabulary of 10,000 keys;
    a test split from one of its own, so most of its keys were never keys in training."""
    task = make_task("asentmax_mqmtar", longest_test=256)
    vocabulary = {tuple(w) for w in task._vocabulary(torch.Generator().manual_seed(TRAIN_VOCABULARY_SEED))[0].tolist()}
    trained = set().union(*(keys_of(task.sample(16, 91, seed).tokens) for seed in range(20)))
    assert trained <= vocabulary and len(trained) > 2000
    tested = keys_of(task.eval_splits(91, 64)[-1].batch.tokens)
    assert len(tested - vocabulary) > 0.75 * len(tested)
    other = keys_of(task.eval_splits(91, 64)[-2].batch.tokens)
    assert len(other - vocabulary) > 0.75 * len(other) and other != tested


def test_statistics():
    task = make_task("asentmax_mqmtar")
    stats = task.statistics(task.sample(10, 91, 0))
    assert stats["seq_len"] == 64 and stats["pairs_per_sequence"] == 8 and stats["scored_per_sequence"] == 13


@pytest.mark.parametrize(
    "args,message",
    [
        ({"abc_size": 1}, r"abc_size = 1; expected an integer >= 2"),
        ({"k_len": 0}, r"k_len = 0; expected an integer >= 1"),
        ({"kv_fraction": 0}, r"kv_fraction = 0; expected a number in \(0, 1\]"),
        ({"kv_fraction": 1.2}, r"kv_fraction = 1\.2; expected a number in \(0, 1\]"),
        ({"num_words": 70000}, r"num_words = 70000; expected at most abc_size \*\* k_len = 65536"),
        ({"k_len": 4}, r"abc_size \*\* k_len = 4294967296; expected at most 16777216"),
        ({"num_q": 5}, r"num_q = 5 queries need that many pairs, and the shortest training seq_len 32 holds 4"),
    ],
)
def test_bad_parameters(args, message):
    with pytest.raises(ValueError, match=rf"asentmax_mqmtar: {message}"):
        make_task("asentmax_mqmtar", **args)


@pytest.mark.parametrize("length", [0, 54, 60, 92, 91.0])
def test_bad_length(length):
    with pytest.raises(ValueError, match=r"asentmax_mqmtar: length = .*expected a length the authors' layout makes"):
        make_task("asentmax_mqmtar").sample(1, length, 0)
