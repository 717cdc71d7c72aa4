"""One table across comparisons: does a configuration meet every bar at once (text, flip-flop, the suite)?

Reads the rows of finished comparisons (text: ``tra compare lm``; flip-flop; suite task folders), pools them
per task (a method's rows come from the first folder that has it; every pooled method of a task must share
the training budget), and checks each candidate configuration against a baseline:

- text: mean bits per byte within ``text_tolerance`` of the baseline at 1x (relative), and within
  ``long_tolerance`` at the longest length (default 0: no worse than the baseline there);
- flip-flop: full-sequence accuracy >= ``exact`` on every split in every seed;
- majority: full-sequence accuracy >= ``exact`` at the longest length in every seed;
- MQAR and hierarchy (any other suite task): fitted in at least as many seeds as the baseline.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ..utils.jsonl import read_jsonl
from .fit import steps_to_fit
from .tables import label, mean_std

# Training-budget fields every pooled method of one task must share (only the attention may differ).
BUDGET_FIELDS = ("task", "task_args", "length", "steps", "batch_size", "grad_accum", "warmup_steps", "weight_decay")
MODEL_FIELDS = ("d_model", "n_layers", "n_heads", "mlp_ratio", "block_style", "dropout")
TEXT_METRIC = "bits_per_byte"
EXACT = 0.99  # full-sequence accuracy that counts as exact


def budget(row: dict) -> tuple:
    """The fields of a row's training config that a fair comparison holds fixed."""
    config = row.get("config") or {}
    model = config.get("model", {})
    fields = [config.get(f) for f in BUDGET_FIELDS] + [model.get(f) for f in MODEL_FIELDS]
    return tuple(json.dumps(value, sort_keys=True) for value in fields)


def pooled_rows(folders: list[Path], methods=None) -> tuple[list[dict], dict[str, Path]]:
    """Every row of each method (of ``methods``, default all) from the first folder holding that method, and
    where each method came from.

    A ValueError names the folder when one has no rows, and the two methods when budgets differ.
    """
    rows, source = [], {}
    for folder in folders:
        found = read_jsonl(folder / "results.jsonl")
        if not found:
            raise ValueError(f"{folder / 'results.jsonl'} is missing or empty; expected the rows of a comparison")
        for method in dict.fromkeys(r["method"] for r in found):
            if method not in source and (methods is None or method in methods):
                source[method] = folder
                rows += [r for r in found if r["method"] == method]
    budgets = {}
    for r in rows:
        budgets.setdefault(budget(r), (r["method"], source[r["method"]]))
    if len(budgets) > 1:
        (m1, f1), (m2, f2) = list(budgets.values())[:2]
        raise ValueError(
            f"{m1} ({f1}) and {m2} ({f2}) were trained with different budgets; expected one budget per task "
            f"(the same {', '.join(BUDGET_FIELDS)} and model size)"
        )
    return rows, source


def per_seed(rows: list[dict], method: str, metric: str, split: str | None = None, length=None) -> list[float]:
    """The values of ``metric`` for ``method`` (one per seed), on one split and length if given."""
    return [
        r["value"]
        for r in rows
        if r["method"] == method
        and r["metric"] == metric
        and (split is None or r["split"] == split)
        and (length is None or r["length"] == length)
    ]


def text_gaps(rows: list[dict], method: str, baseline: str) -> dict[int, float]:
    """Per evaluation length: relative gap (method / baseline - 1) of the mean bits per byte, non-overlapping."""
    lengths = sorted({r["length"] for r in rows if r["metric"] == TEXT_METRIC and r["split"] == "non_overlapping"})
    gaps = {}
    for length in lengths:
        mine = per_seed(rows, method, TEXT_METRIC, "non_overlapping", length)
        theirs = per_seed(rows, baseline, TEXT_METRIC, "non_overlapping", length)
        if mine and theirs:
            gaps[length] = mean_std(mine)[0] / mean_std(theirs)[0] - 1
    return gaps


def worst_accuracy(rows: list[dict], method: str, length=None) -> float | None:
    """The lowest full-sequence accuracy over every test split (or one length) and seed; None without rows."""
    values = [
        r["value"]
        for r in rows
        if r["method"] == method
        and r["metric"] == "full_seq_acc"
        and r["split"] != "validation"
        and (length is None or r["length"] == length)
    ]
    return min(values) if values else None


def fitted(rows: list[dict], method: str) -> tuple[int, int] | None:
    """(seeds fitted, seeds trained) of a method trained to fit; None without rows."""
    seeds = steps_to_fit(rows).get(method)
    return None if not seeds else (sum(s is not None for s in seeds), len(seeds))


def scorecard(
    candidates: list[str],
    baseline: str,
    text: list[Path] = (),
    flipflop: list[Path] = (),
    suite: list[Path] = (),
    text_tolerance: float = 0.005,
    long_tolerance: float = 0.0,
    tasks: list[str] | None = None,
) -> tuple[list[str], list[dict], dict[str, dict[str, Path]]]:
    """(column names, one dict per method: cells, bars passed and ``met`` (every bar met; None for the
    baseline), and per comparison the folder each method's rows came from). ``tasks`` restricts the suite
    tasks (default: every task folder found)."""
    columns, checks = [], []  # checks: (column, function(method) -> (cell, passed or None))
    methods = [baseline, *candidates]
    sources: dict[str, dict[str, Path]] = {}  # per comparison: method -> the folder its rows came from
    if text:
        rows, sources["text"] = pooled_rows(list(text), methods)

        def text_check(method, rows=rows):
            gaps = text_gaps(rows, method, baseline)
            if not gaps:
                return "n/a", None
            short, long = min(gaps), max(gaps)
            cell = f"{100 * gaps[short]:+.2f}% / {100 * gaps[long]:+.2f}%"
            return cell, gaps[short] <= text_tolerance and gaps[long] <= long_tolerance

        columns.append(f"text bpb vs {label(baseline)}: 1x / longest")
        checks.append(text_check)
    if flipflop:
        rows, sources["flip-flop"] = pooled_rows(list(flipflop), methods)

        def flipflop_check(method, rows=rows):
            worst = worst_accuracy(rows, method)
            return ("n/a", None) if worst is None else (f"{worst:.3f}", worst >= EXACT)

        columns.append("flip-flop: worst split, worst seed")
        checks.append(flipflop_check)
    by_task: dict[str, list[Path]] = defaultdict(list)
    for folder in suite:
        for task_dir in sorted(p for p in Path(folder).iterdir() if (p / "results.jsonl").is_file()):
            if tasks is None or task_dir.name in tasks:
                by_task[task_dir.name].append(task_dir)
    for task, folders in by_task.items():
        rows, sources[task] = pooled_rows(folders, methods)
        if task == "majority":
            longest = max(r["length"] for r in rows if r["metric"] == "full_seq_acc")

            def majority_check(method, rows=rows, longest=longest):
                worst = worst_accuracy(rows, method, longest)
                return ("n/a", None) if worst is None else (f"{worst:.3f}", worst >= EXACT)

            columns.append(f"majority at {longest}: worst seed")
            checks.append(majority_check)
        else:

            def fit_check(method, rows=rows):
                mine, theirs = fitted(rows, method), fitted(rows, baseline)
                if mine is None:
                    return "n/a", None
                return f"{mine[0]}/{mine[1]}", theirs is not None and mine[0] >= theirs[0]

            columns.append(f"{task}: seeds fitted")
            checks.append(fit_check)
    table = []
    for method in methods:
        cells = [check(method) for check in checks]
        met = None if method == baseline else all(passed for _, passed in cells)
        table.append({"method": method, "cells": [c for c, _ in cells], "passed": [p for _, p in cells], "met": met})
    return columns, table, sources


def scorecard_markdown(columns: list[str], table: list[dict]) -> list[str]:
    """The scorecard as a Markdown table: a cell that misses its bar is marked ✗, the baseline row is plain."""
    lines = ["| method | " + " | ".join(columns) + " | every bar |", "|---" * (len(columns) + 2) + "|"]
    for entry in table:
        cells = [
            cell if passed is None or entry["met"] is None else f"{cell} {'✓' if passed else '✗'}"
            for cell, passed in zip(entry["cells"], entry["passed"])
        ]
        verdict = "(baseline)" if entry["met"] is None else ("**yes**" if entry["met"] else "no")
        lines.append(f"| {label(entry['method'])} | " + " | ".join(cells) + f" | {verdict} |")
    return lines


def scorecard_page(columns, table, sources, command: str, notes: str = "") -> str:
    """The Markdown page: the command, the table, where every method's rows came from, the discussion."""
    lines = ["# One configuration against every bar", "", f"Command: `{command}`  ", ""]
    lines += [__doc__.split("\n\n", 1)[1].strip(), ""]
    lines += scorecard_markdown(columns, table)
    lines += ["", "## Sources", "", "| comparison | method | rows from |", "|---|---|---|"]
    for comparison, methods in sources.items():
        for method in [e["method"] for e in table]:
            if method in methods:
                lines.append(f"| {comparison} | {label(method)} | `{methods[method]}` |")
    if notes:
        lines += ["", "## Discussion", "", notes.strip()]
    return "\n".join(lines) + "\n"
