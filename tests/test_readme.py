"""The README's Python examples run as written (from a temporary working directory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tra_attn.experiments.methods import unregister_method
from tra_attn.layers import unregister_attention

README = Path(__file__).parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_examples():
    assert len(BLOCKS) >= 3


def test_the_readme_examples_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    try:
        for block in BLOCKS:
            exec(compile(block, str(README), "exec"), namespace)
    finally:
        unregister_method("mine_paperblock")
        unregister_method("mine")
        unregister_attention("mine")
    assert (tmp_path / "my_model" / "model.safetensors").is_file()


@pytest.mark.parametrize("command", ["tra flipflop", "python -m pytest -q"])
def test_the_quick_start_commands_are_the_ones_ci_runs(command):
    text = README.read_text()
    assert command in text
    if command.startswith("python -m pytest"):
        ci = (README.parent / ".ci" / "run").read_text()
        assert "ruff check . && python -m pytest -q" in ci and "ruff check . && python -m pytest -q" in text
