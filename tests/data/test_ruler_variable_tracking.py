"""RULER's variable tracking (ruler_variable_tracking): chains as RULER's variable_tracking.py draws them, in chain
order in the haystack, that a plain reference solver resolves to the queried number; lengths, seeds, splits, text,
bad input."""

from __future__ import annotations

import pytest
import torch

from tra_attn.data import make_task, split_sequences
from tra_attn.data.synthetic.passkey import LENGTH_FACTORS
from tra_attn.data.synthetic.ruler_layout import ANSWER, FILLER0, MARK, NUM_FILLER, QUERY, SEP, WORD0
from tra_attn.data.task import TEST_SEED


def parse(row: list[int], digits: int = 5):
    """Plain-Python reading: the assignments [(position, variable, number or variable)], the haystack, the query
    and the answer."""
    question, colon = row.index(QUERY), row.index(ANSWER)
    statements, filler, i = [], [], 0
    while i < question:
        if row[i] == MARK:
            assert row[i + 1] >= WORD0 and row[i + 2] == SEP
            if row[i + 3] >= WORD0:
                statements.append((i, row[i + 1], row[i + 3]))
                i += 4
            else:
                statements.append((i, row[i + 1], tuple(row[i + 3 : i + 3 + digits])))
                i += 3 + digits
        else:
            filler.append(row[i])
            i += 1
    return statements, filler, tuple(row[question + 1 : colon]), row[colon + 1 :]


def reference(statements, number) -> list[int]:
    """Every variable that holds ``number``, by running the assignments in order (a variable holds what it was
    assigned), in the order they got it."""
    held, bound = {}, []
    for _, var, value in statements:
        held[var] = value if isinstance(value, tuple) else held[value]
        if held[var] == number:
            bound.append(var)
    return bound


@pytest.mark.parametrize(
    "chains,hops,haystack,length", [(1, 4, "noise", None), (1, 4, "noise", 300), (3, 2, "essay", 97)]
)
def test_the_chains_are_rulers_and_resolve_to_the_queried_number(chains, hops, haystack, length):
    task = make_task("ruler_variable_tracking", num_chains=chains, num_hops=hops, haystack=haystack)
    length = length or task.min_length()
    batch = task.sample(64, length, seed=1)
    assert batch.tokens.shape == (64, length) and int(batch.tokens.max()) < task.vocab_size
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        statements, filler, number, answer = parse(row)
        assert len(statements) == chains * (hops + 1)
        variables = [var for _, var, _ in statements]
        assert len(set(variables)) == len(variables)  # every variable distinct, assigned once
        heads = [value for _, _, value in statements if isinstance(value, tuple)]
        assert len(heads) == chains == len(set(heads))  # the chains' numbers are distinct
        for value in heads:  # RULER's np.random.randint(10000, 99999)
            assert 10000 <= int("".join(map(str, value))) <= 99998
        assert number in heads
        assert answer == reference(statements, number) and len(answer) == hops + 1
        assert all(FILLER0 <= t < FILLER0 + NUM_FILLER for t in filler)
        assert mask == [False] * (length - hops - 1) + [True] * (hops + 1)


def test_the_defaults_are_rulers_vt_and_the_noise_haystack_cycles():
    task = make_task("ruler_variable_tracking")
    assert (task.num_chains, task.num_hops, task.value_digits, task.haystack) == (1, 4, 5, "noise")
    assert task.min_length() == 8 + 4 * 4 + 7 + 5 + 1
    for row in task.sample(20, 200, seed=2).tokens.tolist():
        _, filler, _, _ = parse(row)
        assert filler == [FILLER0 + i % NUM_FILLER for i in range(len(filler))]


def test_assignments_are_placed_uniformly_in_chain_order():
    task = make_task("ruler_variable_tracking", num_hops=1)
    tokens = task.sample(4000, 33, seed=3).tokens  # a head and one hop in 12 haystack tokens
    size = 33 - task.fixed_tokens()
    assert size == 12
    before = []
    for row in tokens.tolist():
        statements, _, _, _ = parse(row)
        assert isinstance(statements[0][2], tuple) and statements[1][2] == statements[0][1]  # head, then hop
        before.append(sum(FILLER0 <= t < WORD0 for t in row[: statements[0][0]]))
    counts = torch.bincount(torch.tensor(before), minlength=size + 1).double() / 4000
    # The head is the first of two uniform places: P(q) = (2 (size - q) + 1) / (size + 1)^2.
    expected = torch.tensor([(2 * (size - q) + 1) / (size + 1) ** 2 for q in range(size + 1)])
    assert (counts - expected).abs().max() < 0.02


def test_same_seed_same_sequences():
    task = make_task("ruler_variable_tracking", num_chains=2, haystack="essay")
    assert torch.equal(task.sample(10, 120, 7).tokens, task.sample(10, 120, 7).tokens)
    assert not torch.equal(task.sample(10, 120, 7).tokens, task.sample(10, 120, 8).tokens)


def test_eval_splits_lengthen_the_training_length():
    task = make_task("ruler_variable_tracking")
    splits = task.eval_splits(48, 16)
    assert [(s.split, s.batch.tokens.shape) for s in splits] == [
        ("iid", (split_sequences(16, 4 * 48, f * 48), f * 48)) for f in LENGTH_FACTORS
    ]
    assert splits[0].params == {"num_chains": 1, "num_hops": 4, "value_digits": 5, "haystack": "noise", "num_words": 64}
    assert torch.equal(splits[2].batch.tokens, task.sample(16, 192, TEST_SEED + 2).tokens)


def test_statistics():
    task = make_task("ruler_variable_tracking", num_chains=2)
    stats = task.statistics(task.sample(32, 150, 0))
    assert stats["chains_per_sequence"] == 2 and stats["answer_length"] == 5
    assert 0 < stats["mean_head_distance"] <= stats["max_head_distance"] < 150
    assert stats["haystack_fraction"] == (150 - task.fixed_tokens()) / 150


def test_text_round_trip_and_what_is_refused(tmp_path):
    task = make_task("ruler_variable_tracking", num_chains=2, num_hops=1, value_digits=2)
    batch = task.sample(10, 40, seed=5)
    path = tmp_path / "vt.txt"
    task.write_text(path, batch)
    (loaded,) = task.read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)
    good = "a # w1 = 4 2 # w2 = 1 7 b # w3 = w1 # w4 = w2 ? 4 2 : w1 w3"
    assert task.encode_text(good).tolist()[-2:] == [WORD0 + 1, WORD0 + 3]
    refused = {
        "a # w1 = 4 2 # w2 = 1 7 b # w3 = w1 # w4 = w2 ? 4 2 : w3 w1": r"answers 'w3 w1'; its context calls for 'w1 w3",
        "a # w1 = 4 2 # w2 = 1 7 b # w3 = w1 # w4 = w2 ? 4 3 : w1 w3": r"expected the number of one chain",
        "a # w3 = w1 # w1 = 4 2 # w2 = 1 7 # w4 = w2 ? 4 2 : w1 w3": r"after that variable's own",
        "a # w1 = 4 2 # w1 = 1 7 b # w3 = w1 # w4 = w2 ? 4 2 : w1 w3": r"variable 'w1' assigned twice",
        "a # w1 = 4 2 # w2 = 1 7 b # w3 = w1 # w4 = w1 ? 4 2 : w1 w3": r"a variable assigned to two others",
        "a # w1 = 4 2 # w2 = 0 7 b # w3 = w1 # w4 = w2 ? 4 2 : w1 w3": r"2 digits, the first nonzero",
        "a # w1 = 4 2 # w2 = 1 7 b # w3 = w1 ? 4 2 : w1 w3": r"expected 2 chain\(s\) of 2 variables",
        "a # w1 = 4 2 w5 # w2 = 1 7 b # w3 = w1 # w4 = w2 ? 4 2 : w1 w3": r"only filler symbols and assignments",
    }
    for line, pattern in refused.items():
        with pytest.raises(ValueError, match=r"ruler_variable_tracking: (malformed )?sequence .*" + pattern):
            task.encode_text(line)


@pytest.mark.parametrize(
    "args,pattern",
    [
        ({"num_chains": 0}, r"num_chains = 0; expected an integer >= 1"),
        ({"num_hops": -1}, r"num_hops = -1; expected an integer >= 0"),
        ({"value_digits": "5"}, r"value_digits = '5'; expected an integer >= 1"),
        ({"haystack": "text"}, r"haystack = 'text'; expected one of \['noise', 'essay'\]"),
        ({"num_words": 4}, r"num_words = 4; expected at least num_chains \* \(num_hops \+ 1\) = 5"),
        ({"num_chains": 2, "num_words": 9}, r"num_words = 9; expected at least num_chains \* \(num_hops \+ 1\) = 10"),
        ({"num_chains": 9, "value_digits": 1}, r"value_digits = 1 gives 8 numbers; expected at least num_chains = 9"),
    ],
)
def test_bad_arguments_name_the_argument_and_what_was_expected(args, pattern):
    with pytest.raises(ValueError, match=r"ruler_variable_tracking: " + pattern):
        make_task("ruler_variable_tracking", **args)


def test_bad_lengths_say_the_shortest():
    with pytest.raises(ValueError, match=r"ruler_variable_tracking: length = 36; expected an integer >= 37 \(the assi"):
        make_task("ruler_variable_tracking").sample(2, 36, 0)
