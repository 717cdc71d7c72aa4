"""The Python examples of the README and of docs/model.md run as written (from a temporary working directory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tra_attn.experiments.methods import unregister_method
from tra_attn.layers import unregister_attention

README = Path(__file__).parents[2] / "README.md"
MODEL_DOC = README.parent / "docs" / "model.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_examples():
    assert len(BLOCKS) >= 3


def test_the_readme_examples_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in BLOCKS:
        exec(compile(block, str(README), "exec"), namespace)
    assert (tmp_path / "my_model" / "model.safetensors").is_file()


def test_the_model_guide_examples_run_in_order(tmp_path, monkeypatch):
    """docs/model.md: the config, a drop-in layer, a kind and methods of one's own, and training from Python
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
        for name in ("mine_hot", "mine_paperblock", "mine"):
            unregister_method(name)
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
