"""The multi-query associative recall generator: grammar, answers, splits, loss mask, text format and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from tra_attn.data import make_task, split_sequences
from tra_attn.data.synthetic.mqar import FILLER, KEY0, SEP, MultiQueryRecall
from tra_attn.data.task import TEST_SEED


def reference(row: list[int], num_keys: int) -> tuple[list[int], list[int], list[int]]:
    """Plain-Python semantics: (bound keys, answer positions, expected answers) of one sequence."""
    value0 = KEY0 + num_keys
    bound: dict[int, int] = {}
    positions, answers = [], []
    after_sep = False
    for i, token in enumerate(row):
        if token == SEP:
            after_sep = True
        elif KEY0 <= token < value0:
            if after_sep:
                positions.append(i + 1)
                answers.append(bound[token])
            else:
                assert token not in bound, "keys are distinct"
                bound[token] = row[i + 1]
    return list(bound), positions, answers


def expected_layout(p: float, length: int, pairs: int) -> tuple[int, int]:
    """(queries, filler tokens), as docs/suite_tasks.md states them."""
    filler = math.floor(p * length + 0.5)
    rest = length - filler - 1 - 2 * pairs
    return rest // 2, filler + rest % 2


@pytest.mark.parametrize("pairs,keys,values,p,length", [(8, 32, 32, 0.5, 128), (3, 3, 2, 0.0, 41), (5, 9, 7, 0.9, 300)])
def test_answers_and_loss_mask_match_a_plain_reference(pairs, keys, values, p, length):
    task = MultiQueryRecall(pairs, keys, values, p)
    batch = task.sample(200, length, seed=1)
    queries, filler = expected_layout(p, length, pairs)
    assert batch.tokens.shape == (200, length) and int(batch.tokens.max()) < task.vocab_size
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        bound, positions, answers = reference(row, keys)
        assert row.count(SEP) == 1 and len(bound) == pairs and len(positions) == queries
        assert row.count(FILLER) == filler
        assert [row[i] for i in positions] == answers
        assert [i for i, m in enumerate(mask) if m] == positions


def test_filler_is_spread_evenly_over_the_gaps_between_units():
    batch = MultiQueryRecall(filler_density=0.6).sample(2000, 200, seed=2)
    queries, filler = expected_layout(0.6, 200, 8)
    # Uniform interleaving: each of the units + 1 gaps holds filler / (units + 1) filler tokens on average,
    # so the 8 pairs and the gap before the separator hold 9 of those shares.
    before = ((batch.tokens == FILLER) & ((batch.tokens == SEP).cumsum(1) == 0)).sum(1).double()
    share = 9 * filler / (8 + 1 + queries + 1)
    assert abs(before.mean().item() - share) < 4 * before.std().item() / 2000**0.5


def test_keys_queried_uniformly_and_values_uniform():
    task = MultiQueryRecall(4, 8, 3, 0.2)
    batch = task.sample(1000, 64, seed=3)
    values = batch.tokens[batch.loss_mask] - task.value0
    assert set(values.unique().tolist()) == {0, 1, 2}
    counts = torch.bincount(values, minlength=3).double() / values.numel()
    assert (counts - 1 / 3).abs().max() < 0.02


def test_same_seed_same_sequences():
    task = MultiQueryRecall()
    assert torch.equal(task.sample(10, 64, 7).tokens, task.sample(10, 64, 7).tokens)
    assert not torch.equal(task.sample(10, 64, 7).tokens, task.sample(10, 64, 8).tokens)


def test_statistics_report_the_layout():
    task = MultiQueryRecall(6, 20, 10, 0.3)
    stats = task.statistics(task.sample(50, 100, 0))
    queries, filler = expected_layout(0.3, 100, 6)
    assert stats["pairs_per_sequence"] == 6 and stats["queries_per_sequence"] == queries
    assert stats["filler_fraction"] == filler / 100
    assert 0 < stats["mean_query_distance"] <= stats["max_query_distance"] < 100


def test_eval_splits_differ_only_along_their_axis():
    task = MultiQueryRecall(num_pairs=6, filler_density=0.4)
    splits = task.eval_splits(96, 64)
    assert [(s.split, s.batch.tokens.shape[1]) for s in splits] == [
        ("iid", 96),
        ("sparse", 96),
        ("dense", 96),
        ("iid", 192),
        ("iid", 384),
        ("iid", 768),
    ]
    base = {"num_pairs": 6, "num_keys": 32, "num_values": 32, "filler_density": 0.4}
    assert [s.params for s in splits] == [
        base,
        {**base, "filler_density": 0.7},
        {**base, "filler_density": 0.2},
        base,
        base,
        base,
    ]
    stats = [task.statistics(s.batch) for s in splits]
    for s, st in zip(splits, stats):
        length = s.batch.tokens.shape[1]
        assert s.batch.tokens.shape[0] == split_sequences(64, 96, length)
        assert st["pairs_per_sequence"] == 6
        assert abs(st["filler_fraction"] - s.params["filler_density"]) <= 1.5 / length
    assert stats[1]["queries_per_sequence"] < stats[0]["queries_per_sequence"] < stats[2]["queries_per_sequence"]
    iid = [stats[0], *stats[3:]]
    for shorter, longer in zip(iid, iid[1:]):
        assert longer["mean_query_distance"] > 1.8 * shorter["mean_query_distance"]
    # Each split is drawn from its own test seed: the first is exactly the task's sample at TEST_SEED.
    assert torch.equal(splits[0].batch.tokens, task.sample(64, 96, TEST_SEED).tokens)


def test_eval_splits_name_the_split_that_does_not_fit():
    with pytest.raises(ValueError, match=r"the sparse split at train_length = 40: .*filler_density = 0.75"):
        MultiQueryRecall().eval_splits(40, 4)


def test_text_round_trip(tmp_path):
    task = MultiQueryRecall(4, 12, 5, 0.5)
    batch = task.sample(20, 50, seed=5)
    path = tmp_path / "mqar.txt"
    task.write_text(path, batch)
    lines = path.read_text().splitlines()
    assert len(lines) == 20 and all(len(line.split()) == 50 for line in lines)
    assert lines[0] == task.decode_text(batch.tokens[0])
    (loaded,) = task.read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)


def test_encode_reads_the_documented_words():
    task = MultiQueryRecall(2, 4, 3)
    tokens = task.encode_text("k3 v2 . k0 v0 | . k3 v2 k0 v0 .")
    v0 = KEY0 + 4
    assert tokens.tolist() == [KEY0 + 3, v0 + 2, FILLER, KEY0, v0, SEP, FILLER, KEY0 + 3, v0 + 2, KEY0, v0, FILLER]
    assert task.loss_mask(tokens[None]).nonzero()[:, 1].tolist() == [8, 10]


@pytest.mark.parametrize(
    "text,pattern",
    [
        ("k1 v0 | k1 x0", r"unknown token 'x0'; expected '\.', '\|', k0\.\.k3 or v0\.\.v2"),
        ("k4 v0 | k4 v0", r"unknown token 'k4'"),
        ("k1 v3 | k1 v3", r"unknown token 'v3'"),
        ("k1 v01 | k1 v01", r"unknown token 'v01'"),
        ("k1 v0 . k2 v1", r"expected exactly one separator"),
        ("k1 v0 | | k1 v0", r"expected exactly one separator"),
        ("v0 k1 v0 | k1 v0", r"value 'v0' follows no key"),
        ("k1 . v0 | k1 v0", r"key 'k1' is not followed by a value"),
        ("k1 v0 | k1", r"key 'k1' is not followed by a value"),
        ("k1 v0 k1 v1 | k1 v0", r"key 'k1' bound twice"),
        ("k1 v0 | k1 v2", r"query 'k1' answered 'v2'; the pairs bind it to 'v0'"),
        ("k1 v0 | k2 v0", r"query 'k2' answered 'v0'; the pairs bind it to an unbound key"),
    ],
)
def test_encode_rejects_malformed_lines(text, pattern):
    with pytest.raises(ValueError, match=r"mqar: malformed sequence .*" + pattern):
        MultiQueryRecall(2, 4, 3).encode_text(text)


def test_read_text_names_the_bad_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("k1 v0 | k1 v0\nk1 v0 | k1 v1\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: mqar: malformed sequence"):
        MultiQueryRecall(2, 4, 3).read_text(bad)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"num_pairs": 0}, r"num_pairs = 0; expected an integer >= 1"),
        ({"num_pairs": -3}, r"num_pairs = -3; expected an integer >= 1"),
        ({"num_pairs": 2.0}, r"num_pairs = 2\.0; expected an integer"),
        ({"num_pairs": "8"}, r"num_pairs = '8'; expected an integer"),
        ({"num_keys": 0}, r"num_keys = 0; expected an integer >= 1"),
        ({"num_keys": 4, "num_pairs": 5}, r"num_keys = 4; expected at least num_pairs = 5"),
        ({"num_values": 1}, r"num_values = 1; expected an integer >= 2"),
        ({"num_values": True}, r"num_values = True; expected an integer"),
        ({"filler_density": -0.1}, r"filler_density = -0\.1; expected a fraction in \[0, 1\)"),
        ({"filler_density": 1.0}, r"filler_density = 1\.0; expected a fraction in \[0, 1\)"),
        ({"filler_density": float("nan")}, r"filler_density = nan; expected a fraction"),
        ({"filler_density": "0.5"}, r"filler_density = '0\.5'; expected a fraction"),
    ],
)
def test_bad_parameters(kwargs, pattern):
    with pytest.raises(ValueError, match=r"mqar: " + pattern):
        MultiQueryRecall(**kwargs)


@pytest.mark.parametrize("length", [0, -4, 37, 64.0, True])
def test_bad_length(length):
    # 8 pairs (16 tokens), the separator and one query (2 tokens) at half filler need 38 tokens.
    with pytest.raises(ValueError, match=r"mqar: length = .*expected an integer >= 38 \(num_pairs = 8 pairs"):
        MultiQueryRecall().sample(3, length, 0)
    assert MultiQueryRecall().sample(1, 38, 0).loss_mask.sum() == 1


def test_bad_num():
    with pytest.raises(ValueError, match=r"mqar: num = -1; expected a non-negative integer"):
        MultiQueryRecall().sample(-1, 64, 0)


def test_task_registry():
    task = make_task("mqar", num_pairs=4, filler_density=0.25)
    assert isinstance(task, MultiQueryRecall) and task.vocab_size == KEY0 + 32 + 32
    with pytest.raises(ValueError, match=r"task 'mqar': unknown arguments \['pairs'\]"):
        make_task("mqar", pairs=4)
