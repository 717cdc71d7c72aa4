"""benchmarks/decoding.py runs end to end on a tiny model and writes its page: one row per context, batch and
method, NoPE's ratio 1.00x, and the command that made it."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_benchmark():
    spec = importlib.util.spec_from_file_location("decoding_benchmark", ROOT / "benchmarks" / "decoding.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_decoding_benchmark_writes_its_page(tmp_path, monkeypatch):
    out = tmp_path / "decoding.md"
    argv = ["decoding.py", "--methods", "tra", "fox", "--contexts", "24", "--batches", "1", "2", "--new-tokens", "3",
            "--repeats", "2", "--model", "16", "1", "2", "--out", str(out)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    load_benchmark().main()
    page = out.read_text()
    assert "Command: `python benchmarks/decoding.py --methods tra fox --contexts 24" in page
    rows = re.findall(r"^\| (\d+) \| (\d+) \| (\S+) \| (\d+) \| [\d, ]+ \| ([\d.]+)x \|", page, re.M)
    assert [(c, b, m) for c, b, m, _, _ in rows] == [
        ("24", batch, method) for batch in ("1", "2") for method in ("nope", "tra", "fox")
    ]
    assert all(float(speed) > 0 for *_, speed, _ in rows)
    assert [ratio for *_, method, _, ratio in rows if method == "nope"] == ["1.00", "1.00"]
