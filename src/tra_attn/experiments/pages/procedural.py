"""The section of a procedural task that needs nothing of its own (the suite's tasks), and the summary that opens a
page of several such tasks. Nothing here trains or evaluates a model."""

from __future__ import annotations

import os
from pathlib import Path

from ..fit import FIT_ACCURACY, unfit_methods
from .accuracy import (
    accuracy_table,
    columns,
    per_seed_section,
    recipe_line,
    sweep_section,
    test_data_section,
    unfit_note,
)
from .plots import plot_accuracy
from .tables import Legend, collect, diverged_cells, mean_std, methods_section


def task_section(results, folder: Path, page: Path, level: str = "##", plots: bool = True) -> list[str]:
    """Recipe, methods, tables, plot, test data and sweep of one procedural task (``engine.Results``); the plot is
    ``folder/accuracy.png``, or ``folder/<task>_accuracy.png`` on a page of several tasks (``level`` "###")."""
    rows, legend = results.rows, Legend(results.question.methods)
    lines = [recipe_line(rows), ""]
    lines += methods_section(results, level)
    lines += [f"{level} Full-sequence accuracy (mean ± std over seeds)", "", *accuracy_table(rows, legend), ""]
    lines += unfit_note(rows, "full-sequence accuracy", "its out-of-distribution numbers are not evidence about "
                        "generalisation")  # fmt: skip
    lines += per_seed_section(rows, legend, columns(rows)[-1], level)
    plot = folder / (f"{results.experiment.task}_accuracy.png" if level != "##" else "accuracy.png")
    if plots:
        plot_accuracy(rows, legend, plot)
    lines += [f"![accuracy per split]({os.path.relpath(plot, page.parent)})", ""]
    lines += [f"{level} Per-token accuracy", "", *accuracy_table(rows, legend, "token_acc", with_fit=False), ""]
    return lines + test_data_section(rows, level) + sweep_section(results, level, "full-sequence accuracy")


def summary_table(by_task: dict[str, list[dict]], legend: Legend) -> list[str]:
    """Per task and method: the mean full-sequence accuracy over every test split except IID at the training
    length († a method that did not fit)."""
    methods = legend.order({r["method"] for rows in by_task.values() for r in rows})
    lines = ["| task | " + " | ".join(methods) + " |", "|" + "---|" * (len(methods) + 1)]
    for task, rows in by_task.items():
        train_length = rows[0]["config"]["length"]
        unfit = unfit_methods(rows)
        acc = collect(rows, "full_seq_acc")
        diverged = {method: cell for (method, _), cell in diverged_cells(rows).items()}
        ood = [(s, n) for _, s, n in columns(rows) if (s, n) != ("iid", train_length)]
        cells = []
        for method in methods:
            per_split = [mean_std(acc[(method, s, n)])[0] for s, n in ood if acc[(method, s, n)]]
            mean = sum(per_split) / len(per_split) if per_split else float("nan")
            cell = "n/a" if mean != mean else f"{mean:.3f}" + (" †" if method in unfit else "")
            cells.append(diverged.get(method, cell))
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return lines


def suite_summary(all_results) -> list[str]:
    """The summary that opens a page of several procedural tasks."""
    by_task = {r.experiment.task: r.rows for r in all_results}
    legend = Legend(all_results[0].question.methods)
    return [
        "## Summary: mean full-sequence accuracy over each task's out-of-distribution splits",
        "",
        "Every test split except IID at the training length, averaged (per-split numbers below). "
        f"† did not fit the task (validation accuracy below {FIT_ACCURACY} in some seed).",
        "",
        *summary_table(by_task, legend),
        "",
    ]
