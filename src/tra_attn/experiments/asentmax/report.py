"""The ASEntmax suite's part of a page, from result rows: per task, exact match against the authors' test seq_len
(their grid), the paper's published cells beside ours, and for a page of several tasks a summary and one figure
with a panel per task. Nothing here trains or evaluates."""

from __future__ import annotations

import math
import os
from pathlib import Path

from ...data.synthetic.asentmax_layout import test_seq_lens
from ..fit import FIT_ACCURACY, unfit_methods
from ..pages.accuracy import (
    accuracy_table,
    per_seed_section,
    recipe_line,
    sweep_section,
    task_of,
    test_data_section,
    unfit_note,
)
from ..pages.plots import pyplot, save_figure
from ..pages.tables import Legend, collect, diverged_cells, mean_std, methods_section
from .presets import AUTHORS
from .published import PUBLISHED, SOURCE

Column = tuple[str, str, int]  # (title, split, length)


def seq_len_of_lengths(rows: list[dict]) -> dict[int, int]:
    """The authors' test seq_len of every test length in tokens (several seq_len may build one MQMTAR layout: the
    test's own is the power of two)."""
    task = task_of(rows)
    return {task.length_of(s): s for s in test_seq_lens(task.longest_test)}


def seq_len_columns(rows: list[dict]) -> list[Column]:
    """One column per test seq_len found in the rows: '64 (131)' is seq_len 64, 131 tokens."""
    seq_len = seq_len_of_lengths(rows)
    lengths = sorted({r["length"] for r in rows if r["split"] == "test"})
    return [(f"{seq_len.get(n, '?')} ({n})", "test", n) for n in lengths]


def budget_line(rows: list[dict]) -> str:
    """Our training lengths and budget beside the authors'."""
    config = rows[0]["config"]
    task = config["task"]
    authors = AUTHORS[task]
    task_instance = task_of(rows)
    low, high = task_instance.authors_train_seq_len
    samples = config["steps"] * config["batch_size"]
    model = config["model"]
    theirs = (
        f"{authors.layers} layers, hidden {authors.hidden}, {authors.heads} heads, {authors.steps:,} steps of "
        f"{authors.batch}"
        if authors.layers
        else f"no published model or step count for this task, batch {authors.batch}"
    )
    return (
        f"Training lengths: the authors' seq_len {low}-{high}, each row one sequence of a length drawn uniformly from "
        f"the task's valid lengths in {task_instance.length_of(low)}-{config['length']} "
        f"tokens (`length_spread` {config['length_spread']:.3f}), the rest padding no token attends to. Budget: at "
        f"most {samples:,} samples ({config['steps']:,} steps of {config['batch_size']}) on a model of "
        f"{model['n_layers']} layer{'s' * (model['n_layers'] != 1)} and d_model {model['d_model']}; the authors "
        f"train {authors.samples:,} samples "
        f"({theirs}; deep-spin/asentmax be54bd3f `synthetic/configs/{authors.source}`), "
        f"{authors.samples / samples:,.0f} times as many. Columns are the authors' test seq_len, tokens in brackets."
    )


def published_lines(rows: list[dict], legend: Legend, level: str) -> list[str]:
    """The paper's cells for this task beside our rows at the same seq_len, where it publishes any."""
    task = rows[0]["task"]
    if task not in PUBLISHED:
        return []
    seq_len = seq_len_of_lengths(rows)
    ours = {s: n for n, s in seq_len.items()}
    columns = sorted({s for cells in PUBLISHED[task].values() for s in cells})
    values = collect(rows, "full_seq_acc")
    lines = [
        f"{level} Beside the published numbers",
        "",
        f"Exact match (%) at each test seq_len: the paper's from {SOURCE}; ours the mean over seeds at the rate each "
        "method selected, n/a where we do not test that seq_len. The budgets differ as the line above says.",
        "",
        "| method | " + " | ".join(map(str, columns)) + " |",
        "|" + "---|" * (len(columns) + 1),
    ]
    for method, cells in PUBLISHED[task].items():
        lines.append(f"| {method}, published | " + " | ".join(f"{cells[s]:g}" if s in cells else "" for s in columns)
                     + " |")  # fmt: skip
    unfit = unfit_methods(rows)
    for method in legend.order({r["method"] for r in rows}):
        cells = [mean_std(values[(method, "test", ours[s])])[0] if s in ours else math.nan for s in columns]
        shown = ["n/a" if math.isnan(v) else f"{100 * v:.1f}" for v in cells]
        lines.append(f"| {method}{' †' if method in unfit else ''}, here | " + " | ".join(shown) + " |")
    return [*lines, ""]


def plot_by_seq_len(ax, rows: list[dict], legend: Legend) -> None:
    """Mean exact match against the test seq_len (log scale), a line per method."""
    cols = seq_len_columns(rows)
    seq_len = seq_len_of_lengths(rows)
    values = collect(rows, "full_seq_acc")
    for method in legend.order({r["method"] for r in rows}):
        means = [mean_std(values[(method, s, n)])[0] for _, s, n in cols]
        ax.plot([seq_len.get(n, n) for _, _, n in cols], means, marker="o", markersize=3, color=legend.color(method),
                label=method)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("test seq_len", fontsize=8)
    ax.set_ylabel("exact match", fontsize=8)
    ax.set_title(rows[0]["task"], fontsize=9)


def plot_task(rows: list[dict], legend: Legend, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    plot_by_seq_len(ax, rows, legend)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)


def asentmax_section(results, folder: Path, page: Path, level: str = "##", plots: bool = True) -> list[str]:
    """Recipe and budget, methods, exact match per test seq_len, the published cells, per seed, the plot, per-token
    accuracy, test data and sweep of one task of the suite."""
    rows, legend = results.rows, Legend(results.question.methods)
    cols = seq_len_columns(rows)
    lines = [recipe_line(rows), "", budget_line(rows), ""]
    lines += methods_section(results, level)
    lines += [f"{level} Exact match per test seq_len (mean ± std over seeds)", ""]
    lines += [*accuracy_table(rows, legend, cols=cols), ""]
    lines += unfit_note(rows, "exact match", "its numbers beyond the training lengths are not evidence about "
                        "generalisation")  # fmt: skip
    lines += published_lines(rows, legend, level)
    lines += per_seed_section(rows, legend, cols[-1], level)
    plot = folder / f"{results.experiment.task}_accuracy.png"
    if plots:
        plot_task(rows, legend, plot)
    lines += [f"![exact match per test seq_len]({os.path.relpath(plot, page.parent)})", ""]
    lines += [f"{level} Per-token accuracy", "", *accuracy_table(rows, legend, "token_acc", False, cols), ""]
    return lines + test_data_section(rows, level) + sweep_section(results, level, "exact match")


def reach(means: list[tuple[int, float]], bar: float = 0.9) -> int | None:
    """The longest seq_len up to which every tested seq_len holds mean exact match >= ``bar`` (None: not even the
    first)."""
    found = None
    for seq_len, value in means:
        if not value >= bar:
            break
        found = seq_len
    return found


def summary_cells(rows: list[dict], methods: list[str]) -> tuple[list[str], list[str]]:
    """Per method: exact match at the longest test seq_len, and the reach at 0.9 (see ``reach``); † unfit."""
    cols = seq_len_columns(rows)
    seq_len = seq_len_of_lengths(rows)
    values = collect(rows, "full_seq_acc")
    unfit = unfit_methods(rows)
    diverged = {method: cell for (method, _), cell in diverged_cells(rows).items()}
    longest, reaches = [], []
    for method in methods:
        means = [(seq_len.get(n, n), mean_std(values[(method, s, n)])[0]) for _, s, n in cols]
        mark = " †" if method in unfit else ""
        if method in diverged or not means or math.isnan(means[-1][1]):
            longest.append(diverged.get(method, "n/a"))
            reaches.append(diverged.get(method, "n/a"))
            continue
        longest.append(f"{means[-1][1]:.3f}{mark}")
        found = reach(means)
        reaches.append(("none" if found is None else str(found)) + mark)
    return longest, reaches


def asentmax_summary(all_results, folder: Path, page: Path, plots: bool = True) -> list[str]:
    """The opening of a page of several tasks of the suite: exact match at each task's longest test seq_len, how far
    each method holds 0.9, and the grid as one figure (a panel per task)."""
    legend = Legend(all_results[0].question.methods)
    with_rows = [r for r in all_results if r.rows]
    if not with_rows:  # a partial page without a whole method yet: its first section says what is missing
        return []
    methods = legend.order({row["method"] for r in with_rows for row in r.rows})
    tasks = [r.experiment.task.removeprefix("asentmax_") for r in with_rows]
    cells = {r.experiment.task: summary_cells(r.rows, methods) for r in with_rows}
    header = ["| method | " + " | ".join(tasks) + " |", "|" + "---|" * (len(tasks) + 1)]

    def table(which: int) -> list[str]:
        return header + [
            f"| {method} | " + " | ".join(cells[r.experiment.task][which][i] for r in with_rows) + " |"
            for i, method in enumerate(methods)
        ]

    longest = ", ".join(f"{t}: {seq_len_columns(r.rows)[-1][0]}" for t, r in zip(tasks, with_rows))
    lines = [
        "## Summary",
        "",
        f"Exact match at each task's longest test seq_len ({longest}; mean over seeds). † did not fit the task "
        f"(validation exact match below {FIT_ACCURACY} in some seed).",
        "",
        *table(0),
        "",
        "How far each method holds: the longest test seq_len up to which its mean exact match stays at 0.9 or above at "
        "every seq_len (none: below 0.9 already at 64).",
        "",
        *table(1),
        "",
    ]
    plot = folder / "accuracy_by_seq_len.png"
    if plots and with_rows:
        plot_suite(with_rows, legend, plot)
    return lines + [f"![exact match per test seq_len, per task]({os.path.relpath(plot, page.parent)})", ""]


def plot_suite(all_results, legend: Legend, path: Path) -> None:
    plt = pyplot()
    cols = min(len(all_results), 4)
    nrows = math.ceil(len(all_results) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.4 * cols, 2.8 * nrows + 1.2), squeeze=False)
    for ax in axes.flat[len(all_results) :]:
        ax.axis("off")
    for ax, results in zip(axes.flat, all_results):
        plot_by_seq_len(ax, results.rows, legend)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.04 * math.ceil(len(labels) / 5), 1, 1))
    save_figure(fig, path, dpi=90)
