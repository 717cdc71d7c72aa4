"""benchmarks/parallel_runs.py: a tiny run times one question with one and two workers and writes its page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "parallel_runs.py"


@pytest.mark.integration
def test_a_tiny_run_writes_a_page_with_both_settings(tmp_path):
    out = tmp_path / "page.md"
    argv = [sys.executable, str(SCRIPT), "--task", "flipflop", "--preset", "tiny", "--methods", "tra", "nope",
            "--seeds", "0", "--steps", "20", "--jobs", "1", "2", "--repeats", "1", "--out", str(out)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "Command: `python benchmarks/parallel_runs.py --task flipflop --preset tiny --methods tra nope" in page
    assert "Machine: " in page and "thread(s)" in page
    rows = [line for line in page.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2 and rows[0].endswith("| 1.00x |")
