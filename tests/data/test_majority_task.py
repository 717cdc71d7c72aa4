"""The majority-of-marked-bits generator: grammar, answer, splits, loss mask, text format and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from tra_attn.data import make_task, split_sequences
from tra_attn.data.synthetic.majority import BLANK, MARK, ONE, QUERY, ZERO, Majority, encode
from tra_attn.data.task import TEST_SEED


def reference(row: list[int]) -> tuple[list[int], list[int], int]:
    """Plain-Python semantics: (marked bits, distractor bits, expected answer) of one sequence."""
    body = row[:-2]
    marked = [body[i + 1] - ZERO for i, t in enumerate(body) if t == MARK]
    distractors = [t - ZERO for i, t in enumerate(body) if t in (ZERO, ONE) and (i == 0 or body[i - 1] != MARK)]
    return marked, distractors, ZERO + (sum(marked) > len(marked) / 2)


def expected_layout(p: float, length: int, n: int) -> tuple[int, int]:
    """(distractor bits, blanks), as docs/suite_tasks.md states them."""
    distractors = math.floor(p * (length - 2) + 0.5)
    return distractors, length - 2 - distractors - 2 * n


@pytest.mark.parametrize("n,p,length", [(7, 0.5, 128), (1, 0.0, 4), (3, 0.9, 100), (5, 0.3, 16)])
def test_answer_and_loss_mask_match_a_plain_reference(n, p, length):
    batch = Majority(n, p).sample(300, length, seed=1)
    distractor_count, blanks = expected_layout(p, length, n)
    assert batch.tokens.shape == (300, length) and int(batch.tokens.max()) < Majority.vocab_size
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        marked, distractors, answer = reference(row)
        assert len(marked) == n and len(distractors) == distractor_count and row.count(BLANK) == blanks
        assert row[-2] == QUERY and row.count(QUERY) == 1 and row[-1] == answer
        assert mask == [False] * (length - 1) + [True]


def test_bits_are_uniform_and_marked_bits_spread_over_the_body():
    batch = Majority(5, 0.4).sample(3000, 60, seed=2)
    answers = batch.tokens[:, -1] == ONE
    assert abs(answers.double().mean().item() - 0.5) < 0.03
    marked = torch.zeros_like(batch.tokens, dtype=torch.bool)
    marked[:, 1:] = batch.tokens[:, :-1] == MARK
    assert abs((batch.tokens[marked] == ONE).double().mean().item() - 0.5) < 0.02
    # A uniform arrangement of the units centres the marked bits in the body (0..57) on average.
    positions = marked.nonzero()[:, 1].double()
    assert abs(positions.mean().item() - 29) < 0.5


def test_same_seed_same_sequences():
    task = Majority()
    assert torch.equal(task.sample(10, 64, 7).tokens, task.sample(10, 64, 7).tokens)
    assert not torch.equal(task.sample(10, 64, 7).tokens, task.sample(10, 64, 8).tokens)


def test_statistics_report_the_layout():
    stats = Majority(3, 0.25).statistics(Majority(3, 0.25).sample(50, 102, 0))
    assert stats["marked_per_sequence"] == 3 and stats["distractors_per_sequence"] == 25
    assert stats["distractor_fraction"] == 0.25 and stats["blank_fraction"] == (100 - 25 - 2 * 3) / 100
    assert 0 < stats["mean_marked_distance"] <= stats["max_marked_distance"] < 100


def test_eval_splits_differ_only_along_their_axis():
    task = Majority(num_marked=5, distractor_density=0.4)
    splits = task.eval_splits(66, 64)
    assert [(s.split, s.batch.tokens.shape[1]) for s in splits] == [
        ("iid", 66),
        ("sparse", 66),
        ("dense", 66),
        ("iid", 132),
        ("iid", 264),
        ("iid", 528),
    ]
    base = {"num_marked": 5, "distractor_density": 0.4}
    assert [s.params for s in splits] == [
        base,
        {**base, "distractor_density": 0.7},
        {**base, "distractor_density": 0.2},
        base,
        base,
        base,
    ]
    stats = [task.statistics(s.batch) for s in splits]
    for s, st in zip(splits, stats):
        length = s.batch.tokens.shape[1]
        assert s.batch.tokens.shape[0] == split_sequences(64, 66, length)
        assert st["marked_per_sequence"] == 5
        assert abs(st["distractor_fraction"] - s.params["distractor_density"]) <= 0.5 / (length - 2)
    iid = [stats[0], *stats[3:]]
    for shorter, longer in zip(iid, iid[1:]):
        assert longer["mean_marked_distance"] > 1.5 * shorter["mean_marked_distance"]
    assert torch.equal(splits[0].batch.tokens, task.sample(64, 66, TEST_SEED).tokens)


def test_eval_splits_name_the_split_that_does_not_fit():
    with pytest.raises(ValueError, match=r"the sparse split at train_length = 40: .*distractor_density = 0.75"):
        Majority().eval_splits(40, 4)


def test_text_round_trip(tmp_path):
    task = Majority(3, 0.5)
    batch = task.sample(20, 30, seed=5)
    path = tmp_path / "majority.txt"
    task.write_text(path, batch)
    lines = path.read_text().splitlines()
    assert len(lines) == 20 and all(len(line) == 30 for line in lines)
    assert lines[0] == task.decode_text(batch.tokens[0])
    (loaded,) = task.read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)


def test_encode_reads_the_documented_characters():
    assert encode(".*1 0*0*1?1".replace(" ", "")).tolist() == [
        BLANK,
        MARK,
        ONE,
        ZERO,
        MARK,
        ZERO,
        MARK,
        ONE,
        QUERY,
        ONE,
    ]


@pytest.mark.parametrize(
    "text,pattern",
    [
        ("*1x?1", r"malformed sequence '\*1x\?1'; expected characters of"),
        ("*11?", r"malformed sequence .*ending in '\?' and the answer bit"),
        ("*1?1?1", r"malformed sequence"),
        ("*.1?1", r"expected a bit after every '\*' and after '\?'"),
        ("1*?1", r"expected a bit after every '\*'"),
        ("*1?.", r"expected a bit after every '\*' and after '\?'"),
        ("*1*0?1", r"has 2 marked bits; expected an odd number"),
        ("1.0?1", r"has 0 marked bits; expected an odd number"),
        ("*1*0*0.11?1", r"answers '1'; its marked bits' majority is '0'"),
    ],
)
def test_encode_rejects_malformed_lines(text, pattern):
    with pytest.raises(ValueError, match=r"majority: .*" + pattern):
        encode(text)


def test_read_text_names_the_bad_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("*1?1\n*1?0\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: majority: sequence '\*1\?0' answers '0'"):
        Majority().read_text(bad)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"num_marked": 0}, r"num_marked = 0; expected a positive odd integer"),
        ({"num_marked": -3}, r"num_marked = -3; expected a positive odd integer"),
        ({"num_marked": 4}, r"num_marked = 4; expected a positive odd integer \(no ties\)"),
        ({"num_marked": 5.0}, r"num_marked = 5\.0; expected a positive odd integer"),
        ({"num_marked": True}, r"num_marked = True; expected a positive odd integer"),
        ({"distractor_density": -0.1}, r"distractor_density = -0\.1; expected a fraction in \[0, 1\)"),
        ({"distractor_density": 1.0}, r"distractor_density = 1\.0; expected a fraction in \[0, 1\)"),
        ({"distractor_density": float("nan")}, r"distractor_density = nan; expected a fraction"),
        ({"distractor_density": "0.5"}, r"distractor_density = '0\.5'; expected a fraction"),
    ],
)
def test_bad_parameters(kwargs, pattern):
    with pytest.raises(ValueError, match=r"majority: " + pattern):
        Majority(**kwargs)


@pytest.mark.parametrize("length", [0, -4, 29, 64.0, False])
def test_bad_length(length):
    # 7 marked bits (14 tokens) at half distractors, the query and the answer need 30 tokens.
    with pytest.raises(ValueError, match=r"majority: length = .*expected an integer >= 30 \(num_marked = 7"):
        Majority().sample(3, length, 0)
    assert Majority().sample(1, 30, 0).tokens.shape == (1, 30)


def test_bad_num():
    with pytest.raises(ValueError, match=r"majority: num = -2; expected a non-negative integer"):
        Majority().sample(-2, 64, 0)


def test_task_registry():
    task = make_task("majority", num_marked=3, distractor_density=0.8)
    assert isinstance(task, Majority) and task.vocab_size == 5
    with pytest.raises(ValueError, match=r"task 'majority': unknown arguments \['marked'\]"):
        make_task("majority", marked=3)
