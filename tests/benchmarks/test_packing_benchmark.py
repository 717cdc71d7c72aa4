"""benchmarks/packing_throughput.py: its two layouts hold the same documents and predict only within one, its
arguments are checked, and (with the model's varlen arguments) a tiny run writes its page."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from tra_attn.models import IGNORE_INDEX

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "packing_throughput.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("packing_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DOCUMENTS = [np.arange(1, 7), np.arange(10, 12), np.arange(20, 31), np.arange(40, 43)]  # 6, 2, 11 and 3 tokens


def predicted_pairs(batches, mask_of) -> list[tuple[int, int]]:
    """Every (token, next token) a layout trains on, in order."""
    pairs = []
    for batch in batches:
        ids, labels = batch["input_ids"], batch["labels"]
        scored = labels != IGNORE_INDEX
        assert (mask_of(batch)[scored]).all()  # only real positions predict
        pairs += list(zip(ids[scored].tolist(), labels[scored].tolist()))
    return pairs


def within_documents(length: int) -> list[tuple[int, int]]:
    """The pairs of consecutive tokens inside each document, without those across a split every ``length``."""
    return [(int(d[i]), int(d[i + 1])) for d in DOCUMENTS for i in range(len(d) - 1) if (i + 1) % length]


def test_padded_rows_hold_one_document_each_right_padded(bench):
    batches = bench.padded_batches(DOCUMENTS, length=6, batch_size=3)
    rows = [row[mask == 1].tolist() for b in batches for row, mask in zip(b["input_ids"], b["attention_mask"])]
    assert rows == [[1, 2, 3, 4, 5, 6], [10, 11], list(range(20, 26)), list(range(26, 31)), [40, 41, 42]]
    assert [tuple(b["input_ids"].shape) for b in batches] == [(3, 6), (2, 5)]  # the longest row of each batch
    for b in batches:  # right padding: every row's real tokens come first
        assert torch.equal(b["attention_mask"], b["attention_mask"].sort(dim=1, descending=True).values)
    pairs = predicted_pairs(batches, lambda b: b["attention_mask"] == 1)
    assert sorted(pairs) == sorted(within_documents(6))


def test_packed_rows_tag_each_token_with_its_document_and_never_predict_across(bench):
    batches = bench.packed_batches(DOCUMENTS, length=6, batch_size=2)
    ids = torch.cat([b["input_ids"] for b in batches])
    segments = torch.cat([b["segment_ids"] for b in batches])
    stream = np.concatenate(DOCUMENTS)
    assert ids.shape == (4, 6) and ids.flatten()[: len(stream)].tolist() == stream.tolist()
    expected = [[0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 1, 1, 1, -1, -1]]
    assert segments.tolist() == expected  # a boundary at a row's start, a document across rows, padding
    # A row's end cuts a pair: document 2 spans positions 8..18 of the stream, and rows start at 12 and 18.
    pairs = predicted_pairs(batches, lambda b: b["segment_ids"] >= 0)
    cut = {(int(stream[p - 1]), int(stream[p])) for p in (12, 18)}
    assert pairs == [pair for pair in within_documents(10**9) if pair not in cut]
    stats = bench.layout_statistics(batches)
    assert stats == {"rows": 4, "steps": 2, "positions": 24, "padding": pytest.approx(2 / 24)}


def test_arguments_are_checked(bench, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--length", "1"])
    assert "--length = 1; expected" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(["--methods", "tra", "nonesuch"])
    assert "--methods: Method.kind = 'nonesuch'; expected one of ['tra', " in capsys.readouterr().err


def test_paragraphs_are_a_seeded_sample_within_the_budget(bench):
    documents = bench.paragraphs(None, tokens=3000, seed=1)
    assert sum(len(d) for d in documents) in (2999, 3000) and all(len(d) >= 2 for d in documents)
    assert all(d.dtype == np.int64 and d.max() < 256 for d in documents)
    again = bench.paragraphs(None, tokens=3000, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(documents, again))
    assert not np.array_equal(bench.paragraphs(None, tokens=3000, seed=2)[0], documents[0])


def test_a_tiny_run_writes_its_page(bench, tmp_path):
    out = tmp_path / "packing.md"
    argv = ["--methods", "tra", "fox", "--length", "32", "--tokens", "400", "--model", "16", "1", "2"]
    text = bench.main([*argv, "--repeats", "1", "--out", str(out)])
    assert out.read_text() == text
    assert "benchmarks/packing_throughput.py --methods tra fox --length 32" in text
    for method in ("tra", "fox"):
        assert any(line.startswith(f"| {method} | ") and "x (per run:" in line for line in text.splitlines())
