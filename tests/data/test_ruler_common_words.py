"""RULER's common words extraction (ruler_common_words): RULER's cwe frequencies (freq_cw, freq_ucw, num_cw), the
answer unambiguous and recovered by counting, lengths up to what the vocabulary holds, seeds, splits, text, bad
input."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tra_attn.data import make_task, split_sequences
from tra_attn.data.synthetic.passkey import LENGTH_FACTORS
from tra_attn.data.synthetic.ruler_layout import ANSWER, QUERY, WORD0
from tra_attn.data.task import TEST_SEED


def reference(row: list[int], num_cw: int) -> list[int]:
    """Count the words before '?': the num_cw most frequent, ascending."""
    counts = Counter(row[: row.index(QUERY)])
    return sorted(word for word, _ in counts.most_common(num_cw))


@pytest.mark.parametrize("args,length", [({}, None), ({}, 1000), ({"num_cw": 2, "freq_cw": 6, "freq_ucw": 1}, 50)])
def test_the_list_has_rulers_frequencies_and_the_answer_is_the_common_words(args, length):
    task = make_task("ruler_common_words", **args)
    num_cw, freq_cw, freq_ucw = task.num_cw, task.freq_cw, task.freq_ucw
    length = length or task.min_length()
    batch = task.sample(40, length, seed=1)
    assert batch.tokens.shape == (40, length) and int(batch.tokens.max()) < task.vocab_size
    context_length = length - 2 - num_cw
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        assert row[context_length : context_length + 2] == [QUERY, ANSWER]
        context, answer = row[:context_length], row[context_length + 2 :]
        assert all(t >= WORD0 for t in context)
        counts = Counter(context)
        assert sorted(counts[word] for word in answer) == [freq_cw] * num_cw  # each common word freq_cw times
        others = sorted((c for word, c in counts.items() if word not in answer), reverse=True)
        assert others and all(1 <= c <= freq_ucw for c in others)
        assert others.count(freq_ucw) >= len(others) - 1  # all uncommon words freq_ucw times but one, fewer
        assert answer == reference(row, num_cw) and answer == sorted(answer)
        assert mask == [False] * (length - num_cw) + [True] * num_cw
    stats = task.statistics(batch)
    assert stats["min_answer_count"] == freq_cw and stats["max_other_count"] <= freq_ucw < freq_cw


def test_the_defaults_are_rulers_cwe():
    task = make_task("ruler_common_words")
    assert (task.num_cw, task.freq_cw, task.freq_ucw) == (10, 30, 3)
    assert task.min_length() == 10 * 30 + 1 + 2 + 10
    assert task.max_length() == 300 + (4096 - 10) * 3 + 12


def test_words_are_drawn_uniformly_from_the_vocabulary_and_the_list_is_shuffled():
    task = make_task("ruler_common_words", num_cw=2, freq_cw=4, freq_ucw=1, num_words=20)
    tokens = task.sample(3000, 20, seed=2).tokens
    words = tokens[:, :16] - WORD0
    assert ((torch.bincount(words.flatten(), minlength=20).double() / words.numel()) - 1 / 20).abs().max() < 0.01
    answers = tokens[:, -2:]
    first_place = (tokens[:, :1] == answers).any(dim=1).double().mean()  # a common word opens 8 of 16 places
    assert abs(first_place - 0.5) < 0.03


def test_same_seed_same_sequences():
    task = make_task("ruler_common_words")
    assert torch.equal(task.sample(5, 400, 7).tokens, task.sample(5, 400, 7).tokens)
    assert not torch.equal(task.sample(5, 400, 7).tokens, task.sample(5, 400, 8).tokens)


def test_eval_splits_lengthen_and_a_too_small_vocabulary_is_refused_before_any_is_built():
    task = make_task("ruler_common_words", num_cw=2, freq_cw=6, freq_ucw=1, num_words=1000)
    splits = task.eval_splits(40, 16)
    assert [(s.split, s.batch.tokens.shape) for s in splits] == [
        ("iid", (split_sequences(16, 4 * 40, f * 40), f * 40)) for f in LENGTH_FACTORS
    ]
    assert torch.equal(splits[1].batch.tokens, task.sample(16, 80, TEST_SEED + 1).tokens)
    small = make_task("ruler_common_words", num_words=1000)
    with pytest.raises(
        ValueError,
        match=r"length = 5120: its list takes 1613 distinct words; expected num_words >= 1613 \(it is 1000\)",
    ):
        small.eval_splits(320, 16)


def test_text_round_trip_and_what_is_refused(tmp_path):
    task = make_task("ruler_common_words", num_cw=2, freq_cw=3, freq_ucw=1, num_words=30)
    batch = task.sample(10, 16, seed=5)
    path = tmp_path / "cwe.txt"
    task.write_text(path, batch)
    (loaded,) = task.read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)
    assert task.encode_text("w4 w1 w4 w2 w1 w4 w1 ? : w1 w4").tolist()[-2:] == [WORD0 + 1, WORD0 + 4]
    refused = {
        "w4 w1 w4 w2 w1 w4 w1 ? : w4 w1": r"answers 'w4 w1'; its context calls for 'w1 w4'",
        "w4 w1 w4 w2 w1 w4 w2 ? : w1 w4": r"expected 2 words that each occur more often than every other word",
        "w4 w1 w4 a w1 w4 w1 ? : w1 w4": r"expected only words before '\?'",
        "w4 w1 w4 w2 w1 w4 w1 ? w1 : w1 w4": r"nothing between '\?' and ':'",
    }
    for line, pattern in refused.items():
        with pytest.raises(ValueError, match=r"ruler_common_words: (malformed )?sequence .*" + pattern):
            task.encode_text(line)


@pytest.mark.parametrize(
    "args,pattern",
    [
        ({"num_cw": 0}, r"num_cw = 0; expected an integer >= 1"),
        ({"freq_cw": 1}, r"freq_cw = 1; expected an integer >= 2"),
        ({"freq_ucw": 0}, r"freq_ucw = 0; expected an integer >= 1"),
        ({"freq_ucw": 30}, r"freq_ucw = 30; expected fewer than freq_cw = 30 occurrences"),
        ({"num_words": 10}, r"num_words = 10; expected more than num_cw = 10"),
    ],
)
def test_bad_arguments_name_the_argument_and_what_was_expected(args, pattern):
    with pytest.raises(ValueError, match=r"ruler_common_words: " + pattern):
        make_task("ruler_common_words", **args)


def test_bad_lengths_say_the_range():
    task = make_task("ruler_common_words", num_words=20)
    with pytest.raises(ValueError, match=r"length = 312; expected an integer >= 313 \(num_cw = 10 words freq_cw = 30"):
        task.sample(2, 312, 0)
    assert task.max_length() == 300 + 30 + 12 and task.sample(1, 342, 0).tokens.shape == (1, 342)
    with pytest.raises(
        ValueError,
        match=r"length = 343: its list takes 21 distinct words; expected num_words >= 21 \(it is 20\), or a length "
        r"<= 342",
    ):
        task.sample(2, 343, 0)
