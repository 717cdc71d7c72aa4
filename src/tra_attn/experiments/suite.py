"""The length-generalisation suite (``tra compare --suite``): the comparison of every suite experiment in
turn, each in its own subfolder, then one page for all of them."""

from __future__ import annotations

import json
from pathlib import Path

from ..utils.atomic import atomic_write_text, make_directory
from ..utils.rows import read_rows, write_rows
from .engine import check_comparison, run_comparison
from .registry import experiments
from .runs import check_distinct


def suite_tasks() -> list[str]:
    """The experiments of the suite (``Experiment.suite``), in registry order."""
    return [name for name, experiment in experiments().items() if experiment.suite]


def check_tasks(tasks) -> list[str]:
    tasks = list(tasks or suite_tasks())
    unknown = [t for t in tasks if t not in suite_tasks()]
    if unknown:
        raise ValueError(f"--tasks: unknown task(s) {unknown}; expected names from {sorted(suite_tasks())}")
    return check_distinct(tasks, "--tasks")


def run_suite(preset_name: str = "cpu", tasks=None, out: str | Path | None = None, command: str = "", **kwargs) -> Path:
    """Run (or finish) every task's comparison in out/<task>/, then write out/results.jsonl (every task's
    rows), out/run.json and the suite's page (that of the rows' experiments: one section per task).
    Keyword arguments are those of ``run_comparison``."""
    found = experiments()
    tasks = check_tasks(tasks)
    for task in tasks:
        if preset_name not in found[task].presets:
            raise ValueError(f"--preset = {preset_name!r}; expected one of {sorted(found[task].presets)} for {task}")
        arguments = ("methods", "seeds", "steps", "lrs", "sweep_seeds", "fit_accuracy")
        check_comparison(found[task], preset_name, *(kwargs.get(name) for name in arguments))  # before any folder
    out = make_directory(out or f"runs/suite_{preset_name}", "--out")
    for task in tasks:
        run_comparison(found[task], preset_name, out=out / task, command=command, **kwargs)
    write_rows(out / "results.jsonl", [row for task in tasks for row in read_rows(out / task / "results.jsonl")])
    preset = f"{preset_name}: {found[tasks[0]].presets[preset_name].description}"
    atomic_write_text(out / "run.json", json.dumps({"command": command, "preset": preset}))
    return found[tasks[0]].write_report(out)
