"""RULER's needle tasks (ruler_niah_*): the needles, keys and values RULER's niah.py draws, the depth of the queried
needles, the answer a plain reference solver recovers, lengths, seeds, the length x depth grid, text, bad input."""

from __future__ import annotations

import math

import pytest
import torch

from tra_attn.data import make_task, split_sequences
from tra_attn.data.synthetic.passkey import DEPTHS, LENGTH_FACTORS
from tra_attn.data.synthetic.ruler_layout import ANSWER, FILLER0, MARK, NUM_FILLER, QUERY, SEP, WORD0
from tra_attn.data.task import TEST_SEED

# RULER's configurations (scripts/synthetic.yaml): (num_needle_k, num_needle_v, num_needle_q, haystack).
CONFIGS = {
    "ruler_niah_single": (1, 1, 1, "noise"),  # niah_single_1
    "ruler_niah_multikey": (4, 1, 1, "essay"),  # niah_multikey_1
    "ruler_niah_multivalue": (1, 4, 1, "essay"),  # niah_multivalue
    "ruler_niah_multiquery": (4, 1, 4, "essay"),  # niah_multiquery (RULER raises num_needle_k to num_needle_q)
}
NAMES = sorted(CONFIGS)


def parse(row: list[int], digits: int = 7):
    """Plain-Python reading of a row: needles [(start, key, value)], the haystack tokens in order, the queried
    keys and the answer."""
    question, colon = row.index(QUERY), row.index(ANSWER)
    needles, filler, i = [], [], 0
    while i < question:
        if row[i] == MARK:
            assert row[i + 1] >= WORD0 and row[i + 2] == SEP
            needles.append((i, row[i + 1], row[i + 3 : i + 3 + digits]))
            i += 3 + digits
        else:
            filler.append(row[i])
            i += 1
    return needles, filler, row[question + 1 : colon], row[colon + 1 :]


def reference_answer(needles, queried) -> list[int]:
    """What the task asks: for each queried key in order, the values of its needles in the order they appear."""
    return [d for key in queried for _, k, value in needles if k == key for d in value]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("length", [None, 200, 777])
def test_samples_have_rulers_needles_and_the_answer_is_recoverable(name, length):
    task = make_task(name)
    k, v, q, haystack = CONFIGS[name]
    assert (task.num_needle_k, task.num_needle_v, task.num_needle_q, task.haystack) == (k, v, q, haystack)
    assert task.value_digits == 7 and task.depth is None
    length = length or task.min_length()
    batch = task.sample(64, length, seed=1)
    assert batch.tokens.shape == (64, length) and int(batch.tokens.max()) < task.vocab_size
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        needles, filler, queried, answer = parse(row)
        assert len(needles) == k * v and len({key for _, key, _ in needles}) == k
        for _, _, value in needles:  # RULER's generate_random_number: 7 digits, 1000000..9999999
            assert len(value) == 7 and all(0 <= x <= 9 for x in value) and value[0] != 0
        assert len(queried) == q == len(set(queried))
        context = row[: row.index(QUERY)]
        for key in queried:
            assert context.count(key) == v  # the queried key once per needle of its own, nowhere else
        assert all(FILLER0 <= t < FILLER0 + NUM_FILLER for t in filler) and len(filler) == length - task.fixed_tokens()
        assert answer == reference_answer(needles, queried) and len(answer) == q * v * 7
        assert mask == [False] * (length - q * v * 7) + [True] * (q * v * 7)  # exactly the answer is scored


def test_the_noise_haystack_is_the_filler_cycle_and_the_essay_is_random():
    noise = make_task("ruler_niah_single").sample(20, 150, seed=2)
    for row in noise.tokens.tolist():
        _, filler, _, _ = parse(row)
        assert filler == [FILLER0 + i % NUM_FILLER for i in range(len(filler))]  # the needle interrupts the cycle
    essay = make_task("ruler_niah_single", haystack="essay").sample(400, 150, seed=2).tokens
    symbols = essay[(essay >= FILLER0) & (essay < WORD0)] - FILLER0
    assert ((torch.bincount(symbols, minlength=NUM_FILLER).double() / symbols.numel()) - 1 / 16).abs().max() < 0.01


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("depth", [0.0, 0.1, 0.25, 0.5, 0.75, 1.0])
def test_the_queried_needles_sit_at_the_requested_depth_one_after_another(name, depth):
    task = make_task(name, depth=depth)
    for length in (task.min_length(), 150, 401):
        size = length - task.fixed_tokens()
        for row in task.sample(30, length, seed=3).tokens.tolist():
            needles, _, queried, _ = parse(row)
            starts = [start for start, key, _ in needles if key in queried]
            first = starts[0]
            assert sum(FILLER0 <= t < WORD0 for t in row[:first]) == math.floor(depth * size + 0.5)
            assert starts == list(range(first, first + 10 * len(starts), 10))  # back to back (10 tokens each)
    stats = task.statistics(task.sample(30, 401, seed=3))
    assert stats["mean_depth"] == pytest.approx(depth, abs=0.5 / (401 - task.fixed_tokens()) + 1e-12)


def test_depth_zero_opens_the_sequence_and_depth_one_ends_the_context():
    zero = make_task("ruler_niah_single", depth=0.0).sample(5, 60, 0).tokens
    one = make_task("ruler_niah_single", depth=1.0).sample(5, 60, 0).tokens
    assert (zero[:, 0] == MARK).all() and (one[:, -20] == MARK).all()  # '#' key '=' 7 digits, then '?' key ':' 7


def test_training_places_are_uniform_over_every_place():
    task = make_task("ruler_niah_single")
    batch = task.sample(6000, 32, seed=4)  # 12 haystack tokens: 13 places
    places = (batch.tokens == MARK).int().argmax(dim=1)
    counts = torch.bincount(places, minlength=13).double() / 6000
    assert counts.numel() == 13 and (counts - 1 / 13).abs().max() < 0.02
    first = batch.tokens[batch.loss_mask].view(6000, 7)[:, 0]
    assert set(first.tolist()) == set(range(1, 10))  # the first digit of a value is never 0


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_sequences_and_the_depths_share_everything_but_the_place(name):
    task = make_task(name)
    assert torch.equal(task.sample(10, 160, 7).tokens, task.sample(10, 160, 7).tokens)
    assert not torch.equal(task.sample(10, 160, 7).tokens, task.sample(10, 160, 8).tokens)
    rows = [make_task(name, depth=d).sample(10, 160, 7).tokens.tolist() for d in (0.0, 0.5, 1.0)]
    for shallow, middle, deep in zip(*rows):
        a, b, c = parse(shallow), parse(middle), parse(deep)
        assert a[1] == b[1] == c[1] and a[2] == b[2] == c[2]  # the same haystack and query
        assert sorted(x[1:] for x in a[0]) == sorted(x[1:] for x in c[0])  # the same needles
        assert sorted(a[3]) == sorted(c[3])  # the same values answered (their order follows their places)


def test_eval_splits_are_the_length_by_depth_grid():
    task = make_task("ruler_niah_multikey")
    splits = task.eval_splits(64, 32)
    assert [(s.split, s.batch.tokens.shape[1]) for s in splits] == [
        (f"depth{d:g}", f * 64) for f in LENGTH_FACTORS for d in DEPTHS
    ]
    for s in splits:
        length = s.batch.tokens.shape[1]
        assert s.batch.tokens.shape[0] == split_sequences(32, 4 * 64, length)  # the budget to 4x, then its tokens
        assert s.params["depth"] == float(s.split[5:]) and s.params["num_needle_k"] == 4
    assert torch.equal(
        splits[7].batch.tokens, make_task("ruler_niah_multikey", depth=0.5).sample(32, 128, TEST_SEED + 1).tokens
    )
    with pytest.raises(ValueError, match=r"ruler_niah_multikey: length = 50; expected an integer >= 51"):
        task.eval_splits(50, 32)


def test_statistics_count_needles_and_the_answer():
    task = make_task("ruler_niah_multivalue", depth=0.25)
    stats = task.statistics(task.sample(16, 171, 0))  # 100 haystack tokens: the needles after 25
    assert stats["needles_per_sequence"] == 4 and stats["queried_needles_per_sequence"] == 4
    assert stats["answer_length"] == 28 and stats["mean_depth"] == 0.25 and stats["haystack_fraction"] == 100 / 171


def test_text_round_trip_and_what_is_refused(tmp_path):
    task = make_task("ruler_niah_multiquery", num_needle_k=2, num_needle_q=2, value_digits=2)
    batch = task.sample(12, 40, seed=5)
    path = tmp_path / "niah.txt"
    task.write_text(path, batch)
    (loaded,) = task.read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)
    good = "a # w3 = 4 2 b # w1 = 1 7 ? w1 w3 : 1 7 4 2"
    assert task.encode_text(good).tolist()[:4] == [FILLER0, MARK, WORD0 + 3, SEP]
    refused = {
        "a # w3 = 4 2 b # w1 = 1 7 ? w1 w3 : 4 2 1 7": r"answers '4 2 1 7'; its context calls for '1 7 4 2'",
        "a # w3 = 4 2 b # w1 = 1 7 ? w1 w0 : 1 7 4 2": r"expected 2 distinct keys of the needles between",
        "a # w3 = 4 2 b # w3 = 1 7 ? w3 w3 : 1 7 4 2": r"expected 2 distinct keys with 1 needle\(s\) each",
        "a # w3 = 0 2 b # w1 = 1 7 ? w1 w3 : 1 7 0 2": r"'#' key '=' and 2 digits, the first nonzero",
        "a 5 # w3 = 4 2 # w1 = 1 7 ? w1 w3 : 1 7 4 2": r"expected only filler symbols and needles before '\?'",
        "a # w3 = 4 2 b # w1 = 1 7 ? w1 w3 1 7 4 2": r"expected one '\?' and then one ':'",
        "a # w3 = 4 2 b # w1 = 1 7 ? w1 w99 : 1 7 4 2": r"unknown token 'w99'; expected digits",
    }
    for line, pattern in refused.items():
        with pytest.raises(ValueError, match=r"ruler_niah_multiquery: (malformed )?sequence .*" + pattern):
            task.encode_text(line)


@pytest.mark.parametrize(
    "args,pattern",
    [
        ({"num_needle_k": 0}, r"num_needle_k = 0; expected an integer >= 1"),
        ({"num_needle_v": 1.5}, r"num_needle_v = 1.5; expected an integer >= 1"),
        ({"num_needle_q": 2}, r"num_needle_q = 2; expected at most num_needle_k = 1"),
        ({"value_digits": 0}, r"value_digits = 0; expected an integer >= 1"),
        ({"haystack": "needle"}, r"haystack = 'needle'; expected one of \['noise', 'essay'\]"),
        ({"depth": 1.5}, r"depth = 1.5; expected None \(uniform\) or a fraction in \[0, 1\]"),
        ({"depth": True}, r"depth = True; expected None"),
        ({"num_needle_k": 5, "num_words": 4}, r"num_words = 4; expected at least num_needle_k = 5"),
    ],
)
def test_bad_arguments_name_the_argument_and_what_was_expected(args, pattern):
    with pytest.raises(ValueError, match=r"ruler_niah_single: " + pattern):
        make_task("ruler_niah_single", **args)


@pytest.mark.parametrize("length", [20, 0, -3, 30.0, True])
def test_bad_lengths_say_the_shortest(length):
    task = make_task("ruler_niah_single")
    with pytest.raises(ValueError, match=r"ruler_niah_single: length = .*; expected an integer >= 21 \(the needles"):
        task.sample(2, length, 0)
    with pytest.raises(ValueError, match=r"ruler_niah_single: num = -1; expected a non-negative integer"):
        task.sample(-1, 40, 0)
