"""The selective copying generator: grammar, copies, splits, loss mask, text format and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from tra_attn.data import make_task, split_sequences
from tra_attn.data.synthetic.selective_copy import DATA0, MARKER, NOISE, SelectiveCopy
from tra_attn.data.task import TEST_SEED


def reference(row: list[int]) -> tuple[list[int], list[int]]:
    """Plain-Python semantics: (positions of the copies, the data tokens they must reproduce, in order)."""
    marker = row.index(MARKER)
    data = [t for t in row[:marker] if t != NOISE]
    return list(range(marker + 1, marker + 1 + len(data))), data


def gap_noise(n: int, p: float) -> int:
    """Noise tokens between the first and the last data token, as docs/suite_tasks.md states it."""
    return math.floor((n - 1) * p / (1 - p) + 0.5)


@pytest.mark.parametrize("n,symbols,p,length", [(8, 8, 0.8, 128), (1, 2, 0.5, 10), (2, 3, 0.0, 5), (5, 20, 0.9, 200)])
def test_copies_and_loss_mask_match_a_plain_reference(n, symbols, p, length):
    task = SelectiveCopy(n, symbols, p)
    batch = task.sample(200, length, seed=1)
    assert batch.tokens.shape == (200, length) and int(batch.tokens.max()) < task.vocab_size
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        positions, data = reference(row)
        assert row.count(MARKER) == 1 and len(data) == n and positions[-1] == length - 1
        assert [row[i] for i in positions] == data
        assert [i for i, m in enumerate(mask) if m] == positions
        inside = [i for i, t in enumerate(row) if t >= DATA0 and i < positions[0]]
        assert inside[-1] - inside[0] + 1 - n == gap_noise(n, p)


def test_span_offset_and_gaps_are_uniform():
    task = SelectiveCopy(4, 8, 0.5)  # span of 4 data tokens and 3 noise tokens in a 59-token prefix
    batch = task.sample(4000, 64, seed=2)
    data = (batch.tokens >= DATA0) & ~batch.loss_mask
    first = data.float().argmax(1)
    assert first.min() == 0 and first.max() == 59 - 7
    assert abs(first.double().mean().item() - 26) < 0.6
    # The 3 noise tokens fall in the 3 gaps uniformly: each gap holds one on average.
    positions = data.nonzero()[:, 1].view(4000, 4)
    gaps = (positions.diff(dim=1) - 1).double()
    assert (gaps.sum(1) == 3).all() and (gaps.mean(0) - 1).abs().max() < 0.06


def test_data_tokens_are_uniform():
    batch = SelectiveCopy(6, 5, 0.3).sample(1000, 40, seed=3)
    copies = batch.tokens[batch.loss_mask] - DATA0
    counts = torch.bincount(copies, minlength=5).double() / copies.numel()
    assert (counts - 0.2).abs().max() < 0.02


def test_same_seed_same_sequences():
    task = SelectiveCopy()
    assert torch.equal(task.sample(10, 64, 7).tokens, task.sample(10, 64, 7).tokens)
    assert not torch.equal(task.sample(10, 64, 7).tokens, task.sample(10, 64, 8).tokens)


def test_statistics_report_the_layout():
    task = SelectiveCopy(8, 8, 0.8)
    stats = task.statistics(task.sample(50, 100, 0))
    assert stats["copies_per_sequence"] == 8 and stats["mean_span"] == 8 + 28 and stats["mean_gap"] == 4.0
    assert stats["noise_fraction"] == (100 - 8 - 1 - 8) / 100
    assert 8 < stats["mean_copy_distance"] <= stats["max_copy_distance"] < 100


def test_eval_splits_differ_only_along_their_axis():
    task = SelectiveCopy(num_tokens=6, noise_density=0.6)
    splits = task.eval_splits(80, 64)
    assert [(s.split, s.batch.tokens.shape[1]) for s in splits] == [
        ("iid", 80),
        ("sparse", 80),
        ("dense", 80),
        ("iid", 160),
        ("iid", 320),
        ("iid", 640),
    ]
    base = {"num_tokens": 6, "num_symbols": 8, "noise_density": 0.6}
    shifted = [{**base, "noise_density": 0.8}, {**base, "noise_density": 0.3}]
    assert [s.params for s in splits] == [base, *shifted, base, base, base]
    stats = [task.statistics(s.batch) for s in splits]
    for s, st in zip(splits, stats):
        assert s.batch.tokens.shape[0] == split_sequences(64, 80, s.batch.tokens.shape[1])
        assert st["copies_per_sequence"] == 6
        assert st["mean_span"] == 6 + gap_noise(6, s.params["noise_density"])
    assert stats[2]["mean_gap"] < stats[0]["mean_gap"] < stats[1]["mean_gap"]
    assert stats[0]["noise_fraction"] == stats[1]["noise_fraction"] == stats[2]["noise_fraction"]
    iid = [stats[0], *stats[3:]]
    assert all(st["mean_span"] == iid[0]["mean_span"] for st in iid)
    for shorter, longer in zip(iid, iid[1:]):
        assert longer["mean_copy_distance"] > 1.5 * shorter["mean_copy_distance"]
    assert torch.equal(splits[0].batch.tokens, task.sample(64, 80, TEST_SEED).tokens)


def test_eval_splits_name_the_split_that_does_not_fit():
    with pytest.raises(ValueError, match=r"the sparse split at train_length = 50: .*noise_density = 0.9"):
        SelectiveCopy().eval_splits(50, 4)


def test_text_round_trip(tmp_path):
    task = SelectiveCopy(5, 12, 0.5)
    batch = task.sample(20, 30, seed=5)
    path = tmp_path / "copy.txt"
    task.write_text(path, batch)
    lines = path.read_text().splitlines()
    assert len(lines) == 20 and all(len(line.split()) == 30 for line in lines)
    assert lines[0] == task.decode_text(batch.tokens[0])
    (loaded,) = task.read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)


def test_encode_reads_the_documented_words():
    task = SelectiveCopy(2, 4)
    tokens = task.encode_text(". d3 . d0 . > d3 d0")
    assert tokens.tolist() == [NOISE, DATA0 + 3, NOISE, DATA0, NOISE, MARKER, DATA0 + 3, DATA0]
    assert task.loss_mask(tokens[None]).nonzero()[:, 1].tolist() == [6, 7]


@pytest.mark.parametrize(
    "text,pattern",
    [
        ("d1 . > d1 x", r"unknown token 'x'; expected '\.', '>' or d0\.\.d3"),
        ("d4 . > d4", r"unknown token 'd4'"),
        ("d01 > d01", r"unknown token 'd01'"),
        ("d1 . d2 d1 d2", r"expected exactly one marker '>'"),
        ("d1 > d1 > d1", r"expected exactly one marker '>'"),
        ("d1 d2 > d2 d1", r"after '>' comes 'd2 d1'; expected the 2 data tokens before it, in order"),
        ("d1 d2 > d1", r"expected the 2 data tokens before it"),
        ("d1 > d1 .", r"expected the 1 data tokens before it"),
    ],
)
def test_encode_rejects_malformed_lines(text, pattern):
    with pytest.raises(ValueError, match=r"selective_copy: malformed sequence .*" + pattern):
        SelectiveCopy(2, 4).encode_text(text)


def test_read_text_names_the_bad_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("d1 . > d1\nd1 . > d2\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: selective_copy: malformed sequence"):
        SelectiveCopy(2, 4).read_text(bad)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"num_tokens": 0}, r"num_tokens = 0; expected an integer >= 1"),
        ({"num_tokens": -2}, r"num_tokens = -2; expected an integer >= 1"),
        ({"num_tokens": 4.0}, r"num_tokens = 4\.0; expected an integer"),
        ({"num_tokens": "4"}, r"num_tokens = '4'; expected an integer"),
        ({"num_symbols": 1}, r"num_symbols = 1; expected an integer >= 2"),
        ({"num_symbols": False}, r"num_symbols = False; expected an integer"),
        ({"noise_density": -0.5}, r"noise_density = -0\.5; expected a fraction in \[0, 1\)"),
        ({"noise_density": 1}, r"noise_density = 1; expected a fraction in \[0, 1\)"),
        ({"noise_density": float("inf")}, r"noise_density = inf; expected a fraction"),
        ({"noise_density": None}, r"noise_density = None; expected a fraction"),
    ],
)
def test_bad_parameters(kwargs, pattern):
    with pytest.raises(ValueError, match=r"selective_copy: " + pattern):
        SelectiveCopy(**kwargs)


@pytest.mark.parametrize("length", [0, -4, 44, 64.0, True])
def test_bad_length(length):
    # 8 data tokens with 28 noise tokens between them, the marker and 8 copies need 45 tokens.
    with pytest.raises(ValueError, match=r"selective_copy: length = .*expected an integer >= 45 \(num_tokens = 8"):
        SelectiveCopy().sample(3, length, 0)
    assert SelectiveCopy().sample(1, 45, 0).loss_mask.sum() == 8


def test_bad_num():
    with pytest.raises(ValueError, match=r"selective_copy: num = 2\.0; expected a non-negative integer"):
        SelectiveCopy().sample(2.0, 64, 0)


def test_task_registry():
    task = make_task("selective_copy", num_tokens=4, num_symbols=16)
    assert isinstance(task, SelectiveCopy) and task.vocab_size == DATA0 + 16
    with pytest.raises(ValueError, match=r"task 'selective_copy': unknown arguments \['tokens'\]"):
        make_task("selective_copy", tokens=4)
