"""benchmarks/varlen_exactness.py: a minimal run writes its page, with every table's bar row first and every
measured figure at most its column's bar; a kind that refuses a layout gets "not run" cells with the reason."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "varlen_exactness.py"
CELL = re.compile(r"(?<!\\)\|")  # a cell boundary: a pipe not escaped as \|


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("varlen_exactness", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def tables(text: str) -> dict[str, list[list[str]]]:
    """Each '### title' of the page and the cells of its table's rows (header and separator left out)."""
    found, title = {}, None
    for line in text.splitlines():
        if line.startswith("### "):
            title = line[4:]
            found[title] = []
        elif line.startswith("|") and title is not None:
            found[title].append([cell.strip() for cell in CELL.split(line)[1:-1]])
    return {name: rows[2:] for name, rows in found.items()}


@pytest.mark.parametrize("triton", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["", "triton"])
def test_a_minimal_run_writes_its_page_within_every_bar(bench, tmp_path, triton):
    """Without Triton about 3 s of CPU; with it (the interpreter) about 8 s."""
    if triton and not bench.triton_runs():
        pytest.skip("needs CUDA or triton with TRITON_INTERPRET=1")
    out = tmp_path / "exactness.md"
    argv = ["--kinds", "tra", "fox", "--lengths", "3", "1", "4", "--new-tokens", "2", "--op-lengths", "2", "1", "5"]
    argv += [] if triton else ["--no-triton"]
    text = bench.main([*argv, "--out", str(out)])
    assert out.read_text() == text
    assert f"Command: `python benchmarks/varlen_exactness.py {' '.join(argv)} --out {out}`" in text
    assert "commit " in text and "### Summary" in text and "Discussion" not in text
    assert "Notes: [exactness_notes.md](exactness_notes.md)" in text
    found = tables(text)
    model = [name for name in found if name.startswith("Model: ")]
    op = [name for name in found if name.startswith("Op, ")]
    assert len(model) == 3 and len(op) == (2 if triton else 1)
    assert triton or "fp32 Triton was not run here" in text
    labels = ["tra", "fox", *[f"tra, {variant}" for variant in bench.VARIANTS]]
    measured = 0
    for name in model + op:
        bars, *rows = found[name]
        assert bars[0] == "**bar**"
        if name in model:
            assert [row[0] for row in rows] == labels, name
        else:  # 4 layouts x 2 keep rules, each with its forward paths and split-KV decoding
            assert len(rows) == 4 * 2 * 3, name
        for row in rows:
            assert len(row) == len(bars), (name, row)
            for bar, cell in zip(bars[1:], row[1:]):
                if bar and cell != "-":
                    assert float(cell) <= float(bar), (name, row)
                    measured += 1
    assert measured > 100
    summary = found["Summary"]
    assert summary[0][:2] == ["**bar**", "1"] and len(summary) == 1 + len(model) + len(op)
    assert all(float(row[1]) <= 1 and row[4] == "0" for row in summary[1:]) and "not run (" not in text


def test_a_kind_that_refuses_a_layout_gets_not_run_cells_with_the_reason(bench, tmp_path):
    """A kind whose attend takes no segment_ids runs alone but refuses padded and packed batches (about 1 s)."""
    from tra_attn import AttentionKind, register_attention
    from tra_attn.layers import NoPEAttention, unregister_attention
    from tra_attn.ops.causal import causal_sdpa

    class Unsegmented(NoPEAttention):
        def attend(self, x, q, k, v, cache):
            k, v, _ = self.with_cache(cache, k, v)
            return causal_sdpa(q, k, v)

    register_attention(AttentionKind("unsegmented", Unsegmented))
    try:
        argv = ["--kinds", "unsegmented", "--lengths", "3", "1", "4", "--new-tokens", "2", "--op-lengths", "2", "3"]
        text = bench.main([*argv, "--no-triton", "--out", str(tmp_path / "refused.md")])
    finally:
        unregister_attention("unsegmented")
    found = tables(text)
    (logits,) = found["Model: logits (a-d)"][1:]
    assert logits[:5] == ["unsegmented", *["not run (1)"] * 4]
    assert float(logits[5]) > 1e-3 and float(logits[6]) > 0  # the control and the reference still run
    (generation,) = found["Model: greedy generation from left-padded prompts with the KV cache (f)"][1:]
    assert generation == ["unsegmented", *["not run (1)"] * 3]
    assert text.count("1. ValueError: Unsegmented.attend(x, q, k, v, cache) takes no segment_ids") == 3
    assert [row[4] for row in found["Summary"][1:4]] == ["4", "4", "3"]
