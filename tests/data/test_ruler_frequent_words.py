"""RULER's frequent words extraction (ruler_frequent_words): RULER's Zipf counts floor(N k^-alpha / zeta(alpha)) with
the noise word on top, the answer (ranks 2-4) unambiguous and recovered by counting; lengths, seeds, splits, text,
bad input."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from tra_attn.data import make_task, split_sequences
from tra_attn.data.synthetic.passkey import LENGTH_FACTORS
from tra_attn.data.synthetic.ruler_frequent_words import zeta
from tra_attn.data.synthetic.ruler_layout import ANSWER, NOISE, QUERY, WORD0
from tra_attn.data.task import TEST_SEED


def rulers_counts(alpha: float, ranks: int, context: int) -> list[int]:
    """RULER's gen_text counts for the largest N that fits ``context`` tokens, found by counting up (zeta by a
    long direct sum)."""
    z = math.fsum(k**-alpha for k in range(1, 200_000)) + 200_000 ** (1 - alpha) / (alpha - 1)
    n = 0
    while sum(math.floor((n + 1) * k**-alpha / z) for k in range(1, ranks + 1)) <= context:
        n += 1
    return [math.floor(n * k**-alpha / z) for k in range(1, ranks + 1)]


def reference(row: list[int], top: int) -> list[int]:
    """Count the words before '?', the noise aside: the ``top`` most frequent, most frequent first."""
    counts = Counter(t for t in row[: row.index(QUERY)] if t != NOISE)
    return [word for word, _ in counts.most_common(top)]


def test_zeta():
    assert zeta(2.0) == pytest.approx(math.pi**2 / 6, rel=1e-12) and zeta(4.0) == pytest.approx(math.pi**4 / 90)
    assert zeta(1.5) == pytest.approx(2.612375348685488, rel=1e-10)


@pytest.mark.parametrize("alpha,length", [(2.0, None), (2.0, 500), (1.5, 300), (3.0, 2000)])
def test_the_counts_are_rulers_zipf_and_the_answer_is_recoverable(alpha, length):
    task = make_task("ruler_frequent_words", alpha=alpha)
    length = length or task.min_length()
    context_length = length - 5
    expected = rulers_counts(alpha, task.num_words + 1, context_length)
    batch = task.sample(30, length, seed=1)
    assert batch.tokens.shape == (30, length) and int(batch.tokens.max()) < task.vocab_size
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        assert row[context_length : context_length + 2] == [QUERY, ANSWER]
        counts = Counter(row[:context_length])
        words = sorted((c for word, c in counts.items() if word != NOISE), reverse=True)
        assert words == [c for c in expected[1:] if c]  # ranks 2... as RULER counts them
        assert counts[NOISE] == expected[0] + context_length - sum(expected)  # rank 1, and what the rest leaves
        answer = row[context_length + 2 :]
        assert answer == reference(row, 3) and all(w >= WORD0 for w in answer)
        assert counts[answer[0]] > counts[answer[1]] > counts[answer[2]] > (words[3] if len(words) > 3 else 0)
        assert mask == [False] * (length - 3) + [True] * 3
    assert task.statistics(batch)["min_count_gap"] >= 1


def test_the_defaults_are_rulers_fwe_and_the_ranks_take_random_words():
    task = make_task("ruler_frequent_words")
    assert (task.alpha, task.num_top) == (2.0, 3) and task.min_length() == 68
    answers = task.sample(4000, 100, seed=2).tokens[:, -3:] - WORD0
    assert ((torch.bincount(answers.flatten(), minlength=128).double() / answers.numel()) - 1 / 128).abs().max() < 0.01


def test_same_seed_same_sequences():
    task = make_task("ruler_frequent_words")
    assert torch.equal(task.sample(5, 300, 7).tokens, task.sample(5, 300, 7).tokens)
    assert not torch.equal(task.sample(5, 300, 7).tokens, task.sample(5, 300, 8).tokens)


def test_every_length_from_the_shortest_has_an_unambiguous_answer():
    task = make_task("ruler_frequent_words")
    for length in range(task.min_length(), 1500):
        counts = [*task.counts(length), 0, 0, 0]
        assert counts[1] > counts[2] > counts[3] > counts[4], length
        assert sum(task.counts(length)) == length - 5


def test_eval_splits_lengthen_the_training_length():
    task = make_task("ruler_frequent_words")
    splits = task.eval_splits(128, 16)
    assert [(s.split, s.batch.tokens.shape) for s in splits] == [
        ("iid", (split_sequences(16, 4 * 128, f * 128), f * 128)) for f in LENGTH_FACTORS
    ]
    assert splits[0].params == {"alpha": 2.0, "num_top": 3, "num_words": 128}
    assert torch.equal(splits[3].batch.tokens, task.sample(8, 1024, TEST_SEED + 3).tokens)


def test_text_round_trip_and_what_is_refused(tmp_path):
    task = make_task("ruler_frequent_words", num_words=10)
    batch = task.sample(8, 80, seed=5)
    path = tmp_path / "fwe.txt"
    task.write_text(path, batch)
    (loaded,) = task.read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)
    good = ". w4 . w1 w4 . w2 w4 w1 . w4 w1 w2 w4 w3 ? : w4 w1 w2"
    assert task.encode_text(good).tolist()[-3:] == [WORD0 + 4, WORD0 + 1, WORD0 + 2]
    refused = {
        ". w4 . w1 w4 . w2 w4 w1 . w4 w1 w2 w4 w3 ? : w4 w2 w1": r"answers 'w4 w2 w1'; its context calls for 'w4 w1",
        ". w4 . w1 w4 . w2 w4 w1 . w4 w1 w2 w3 w3 ? : w4 w1 w2": r"expected 3 words each more frequent than the next",
        ". w4 . w1 w4 a w2 w4 w1 . w4 w1 w2 w4 w3 ? : w4 w1 w2": r"expected only words and the noise word",
    }
    for line, pattern in refused.items():
        with pytest.raises(ValueError, match=r"ruler_frequent_words: (malformed )?sequence .*" + pattern):
            task.encode_text(line)


@pytest.mark.parametrize(
    "args,pattern",
    [
        ({"alpha": 1.0}, r"alpha = 1.0; expected a number in \(1, 16\] \(zeta diverges at 1\)"),
        ({"alpha": float("nan")}, r"alpha = nan; expected a number in \(1, 16\]"),
        ({"alpha": "2"}, r"alpha = '2'; expected a number"),
        ({"num_top": 0}, r"num_top = 0; expected an integer >= 1"),
        ({"num_words": 2}, r"num_words = 2; expected at least num_top = 3 words"),
    ],
)
def test_bad_arguments_name_the_argument_and_what_was_expected(args, pattern):
    with pytest.raises(ValueError, match=r"ruler_frequent_words: " + pattern):
        make_task("ruler_frequent_words", **args)


def test_bad_lengths_say_the_shortest():
    with pytest.raises(ValueError, match=r"ruler_frequent_words: length = 67; expected an integer >= 68 \(Zipf counts"):
        make_task("ruler_frequent_words").sample(2, 67, 0)
