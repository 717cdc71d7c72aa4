"""``tra bench --suite``: every suite task in turn, each in its own subfolder, then one page for all."""

from __future__ import annotations

import json
from pathlib import Path

from ...utils.atomic import atomic_write_text, make_directory
from ...utils.jsonl import read_jsonl, write_jsonl
from .presets import PRESETS, SUITE_TASKS
from .report import write_report
from .run import run_comparison


def check_tasks(tasks) -> list[str]:
    tasks = list(tasks or SUITE_TASKS)
    unknown = [t for t in tasks if t not in PRESETS]
    if unknown:
        raise ValueError(f"--tasks: unknown task(s) {unknown}; expected names from {sorted(PRESETS)}")
    return tasks


def run_suite(preset_name: str = "cpu", tasks=None, out: str | Path | None = None, command: str = "", **kwargs) -> Path:
    """Run (or finish) every task's comparison in out/<task>/, then write out/results.jsonl (every task's
    rows), out/results.md and the plots. Keyword arguments are those of ``run_comparison``."""
    tasks = check_tasks(tasks)
    for task in tasks:
        if preset_name not in PRESETS[task]:
            raise ValueError(f"--preset = {preset_name!r}; expected one of {sorted(PRESETS[task])} for {task}")
    out = make_directory(out or f"runs/suite_{preset_name}", "--out")
    for task in tasks:
        run_comparison(task, PRESETS[task], preset_name, out=out / task, command=command, **kwargs)
        write_report(out / task)
    write_jsonl(out / "results.jsonl", [row for task in tasks for row in read_jsonl(out / task / "results.jsonl")])
    preset = f"{preset_name}: {PRESETS[tasks[0]][preset_name].description}"
    atomic_write_text(out / "run.json", json.dumps({"command": command, "preset": preset}))
    return write_report(out)
