"""An inspection question: what the TRA models of another question's runs keep, from their checkpoints.

The statistics (``inspect.py``) need the runs' checkpoints, which only the store holds: the first ``tra run``
trains the runs the store lacks, inspects them and writes the folder's ``rows.jsonl`` (each row naming the run
and the commit that trained its checkpoint); the page is then built from those rows alone, as long as they are
the rows of the runs the spec names. Remove ``rows.jsonl`` to inspect again.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..utils.atomic import atomic_write_text
from ..utils.jsonl import read_jsonl
from .engine import Run, Source, gather, run_config
from .inspect import from_rows, inspect_runs, rows, tables
from .registry import experiment as experiment_of
from .scorecard import found_in
from .spec import Inspection

ROWS_NAME = "rows.jsonl"


def inspected_runs(spec: Inspection, source: Source, device: str = "cpu") -> list[Run] | None:
    """The runs the spec inspects (its method at the rate the question selects, one per seed); None when the
    question's sweep is missing (training off)."""
    question = spec.question
    method = found_in(question, spec.method)
    if method is None:
        raise ValueError(f"Inspection.method = {spec.method!r}: not a method of {spec.name}")
    results = gather(dataclasses.replace(question, methods=(method,)), question.tasks[0], source, device)
    if method.label not in results.selected:
        return None
    experiment = experiment_of(question.tasks[0])
    preset = experiment.presets[question.preset]
    lr = results.selected[method.label]
    return [Run(experiment, preset, method, run_config(experiment, question, method, lr, seed, device))
            for seed in spec.seeds]  # fmt: skip


def inspection_lines(spec: Inspection, folder: Path, source: Source, device: str = "cpu") -> tuple[list[str], set]:
    """(the page's body, the commits of the checkpoints inspected); the rows file is written when the runs are
    inspected anew. With runs missing (training off) the body is empty."""
    runs = inspected_runs(spec, source, device)
    if runs is None:
        return [], set()
    path = folder / ROWS_NAME
    found_rows = read_jsonl(path)
    if {r.get("run_id") for r in found_rows} != {run.id for run in runs}:
        checkpoints = [source.checkpoint(run) for run in runs]
        if source.missing:
            return [], set()
        found = inspect_runs([c for c, _ in checkpoints], spec.labels, spec.lengths, None, spec.sequences)
        by_label = {label: (run, commit) for label, run, (_, commit) in zip(spec.labels, runs, checkpoints)}
        found_rows = [{**r, "run_id": by_label[r["run"]][0].id, "commit": by_label[r["run"]][1]} for r in rows(found)]
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in found_rows))
    commits = {r["run_id"]: r["commit"] for r in found_rows}
    lines = [
        f"The runs of {spec.method if isinstance(spec.method, str) else spec.method.label} in "
        f"[{spec.name}](../{spec.name}/README.md), at its selected rate, inspected on {spec.sequences} fresh test "
        f"sequences at {', '.join(f'{n}x' for n in spec.lengths)} the training length (rows: `{ROWS_NAME}`).",
        "",
        "| run | seed | run id | checkpoint trained at |",
        "|---|---|---|---|",
        *(f"| {label} | {run.config.seed} | `{run.id}` | {commits[run.id]} |" for label, run in zip(spec.labels, runs)),
        "",
        *tables(from_rows(found_rows)),
        "",
    ]
    return lines, set(commits.values())
