"""The README: its Python examples (and docs/model.md's) run as written (from a temporary working directory), its
results table is the overview page's, its counts are the registry's and the records', and it stays short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tra_attn.layers import ATTENTION_KINDS, unregister_attention

README = Path(__file__).parents[2] / "README.md"
MODEL_DOC = README.parent / "docs" / "model.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_examples():
    assert len(BLOCKS) >= 2


def test_the_readme_examples_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in BLOCKS:
        exec(compile(block, str(README), "exec"), namespace)
    assert (tmp_path / "my_model" / "model.safetensors").is_file()


def test_the_model_guide_examples_run_in_order(tmp_path, monkeypatch):
    """docs/model.md: the config, a drop-in layer, a kind and its methods, and training from Python
    (its config is built and checked for real; the 2000-step run itself is not: ``train`` only records it)."""
    import tra_attn.training

    monkeypatch.chdir(tmp_path)
    trained = []
    monkeypatch.setattr(tra_attn.training, "train", lambda config, out, **_: trained.append((config, out)))
    namespace: dict = {}
    blocks = re.findall(r"```python\n(.*?)```", MODEL_DOC.read_text(), re.S)
    assert len(blocks) >= 4
    try:
        for block in blocks:
            exec(compile(block, str(MODEL_DOC), "exec"), namespace)
    finally:
        unregister_attention("mine")
    assert namespace["MyAttention"](d_model=8, n_heads=2, temperature=2.0).options.temperature == 2.0
    [(config, out)] = trained
    assert config.model.attention_options.local_window == 4 and out == "runs/tra_local4"


@pytest.mark.parametrize("command", ["tra flipflop", "python -m pytest -q"])
def test_the_quick_start_commands_are_the_ones_ci_runs(command):
    text = README.read_text()
    assert command in text
    if command.startswith("python -m pytest"):
        ci = (README.parent / ".ci" / "run").read_text()
        assert "ruff check . && python -m pytest -q" in ci and "ruff check . && python -m pytest -q" in text


def test_the_readme_is_at_most_220_lines():
    assert len(README.read_text().splitlines()) <= 220


def test_the_results_table_is_the_overview_pages():
    """One figure per cell, copied from results/overview/README.md (its links made relative to the root)."""
    page = (README.parent / "results" / "overview" / "README.md").read_text()
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| method |"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    rows = [line.replace("](../", "](results/") for line in lines[start:end]]
    text = README.read_text()
    assert "\n".join(rows) in text
    legend = next(line for line in page.splitlines() if line.endswith("the question does not run the method."))
    assert legend in text


def test_the_counts_are_the_registrys_and_the_records():
    from tra_attn.experiments.engine import Source, gather
    from tra_attn.experiments.flipflop.main_job import METHODS, main_job
    from tra_attn.experiments.store import Evidence, RunStore

    text = " ".join(README.read_text().split())
    assert f"one of the {len(ATTENTION_KINDS)} registered kinds" in text
    assert all(f"`{kind}`" in text for kind in ATTENTION_KINDS)
    assert f"each of the paper's {len(METHODS)} methods" in text and f"each of its {len(METHODS)} methods" in text
    source = Source(Evidence(README.parent / "results" / "runs"), RunStore(README.parent / "no_store"), train=False)
    rows = gather(main_job("cpu", (0,)), "flipflop", source).rows
    minutes = sum(r["value"] for r in rows if r["metric"] == "train_seconds") / 60
    assert source.missing == [] and f"trained for {minutes:.1f} minutes" in text
