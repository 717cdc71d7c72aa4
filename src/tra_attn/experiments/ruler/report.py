"""The small RULER's part of a page, from result rows: the needle tasks as passkey's length x depth grid, variable
tracking and the word tasks per length, each with exact match and RULER's own metric (``item_acc``:
string_match_all under teacher forcing), and for a page of several tasks a summary at 16x. Nothing here trains or
evaluates."""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..fit import FIT_ACCURACY, unfit_methods
from ..pages.accuracy import (
    accuracy_table,
    columns,
    per_seed_section,
    recipe_line,
    sweep_section,
    test_data_section,
    unfit_note,
)
from ..pages.grid import cell_sizes, depth_means, grid_tables, length_table, longest_column
from ..pages.plots import plot_accuracy, plot_grid
from ..pages.tables import Legend, collect, diverged_cells, mean_std, methods_section

METRICS = (
    "Exact match: a sequence counts only if every answer token is right given the true prefix (so greedy decoding "
    "writes the whole answer: RULER's string_match_all of 1). Item accuracy: per sequence, the fraction of the "
    "answer's items (one value's digits, or one word) with every token right, averaged over sequences: RULER's "
    "string_match_all read under teacher forcing (docs/ruler_suite.md)."
)


def is_needle(rows: list[dict]) -> bool:
    """Whether the rows are a needle task's length x depth grid."""
    return any(r["split"].startswith("depth") for r in rows)


UNFIT = "its numbers beyond the training length are not evidence about generalisation"


def needle_lines(rows: list[dict], legend: Legend, folder: Path, page: Path, level: str, plots: bool) -> list[str]:
    """Exact match and item accuracy per length (mean over depths), per seed at 16x, and the grids."""
    lines = [
        f"{METRICS} The grid puts the queried needles at depths 0%, 25%, 50%, 75% and 100% of the haystack at 1x to "
        f"16x the training length; the depths of one length share their needles and haystack. {cell_sizes(rows)}",
        "",
        f"{level} Exact match per length (mean over depths; mean ± std over seeds)",
        "",
        *length_table(rows, legend, "full_seq_acc", with_fit=True),
        "",
        *unfit_note(rows, "exact match", UNFIT),
        f"{level} Item accuracy per length (mean over depths)",
        "",
        *length_table(rows, legend, "item_acc", with_fit=False),
        "",
    ]
    lines += per_seed_section(depth_means(rows), legend, longest_column(rows), level)
    plot = folder / f"{rows[0]['task']}_grid.png"
    if plots:
        plot_grid(rows, legend, plot)
    lines += [f"{level} Exact match by length and depth (mean over seeds)", "", *grid_tables(rows, legend)]
    return lines + [f"![exact match by length and depth]({os.path.relpath(plot, page.parent)})", ""]


def length_lines(rows: list[dict], legend: Legend, folder: Path, page: Path, level: str, plots: bool) -> list[str]:
    """Exact match and item accuracy per length, per seed at 16x, and the plot."""
    lines = [
        METRICS,
        "",
        f"{level} Exact match per length (mean ± std over seeds)",
        "",
        *accuracy_table(rows, legend),
        "",
        *unfit_note(rows, "exact match", UNFIT),
        f"{level} Item accuracy per length",
        "",
        *accuracy_table(rows, legend, "item_acc", with_fit=False),
        "",
    ]
    lines += per_seed_section(rows, legend, columns(rows)[-1], level)
    plot = folder / f"{rows[0]['task']}_accuracy.png"
    if plots:
        plot_accuracy(rows, legend, plot)
    return lines + [f"![exact match per length]({os.path.relpath(plot, page.parent)})", ""]


def ruler_section(results, folder: Path, page: Path, level: str = "##", plots: bool = True) -> list[str]:
    """Recipe, methods, the task's tables (grid or per length), test data and sweep of one RULER task."""
    rows, legend = results.rows, Legend(results.question.methods)
    lines = [recipe_line(rows), "", *methods_section(results, level)]
    body = needle_lines if is_needle(rows) else length_lines
    lines += body(rows, legend, folder, page, level, plots)
    return lines + test_data_section(rows, level) + sweep_section(results, level, "exact match")


def longest_cells(rows: list[dict], methods: list[str], metric: str) -> list[str]:
    """Per method, ``metric`` at the longest test length (needles: over every depth), mean over seeds; † unfit."""
    rows = depth_means(rows) if is_needle(rows) else rows
    tests = [r for r in rows if r["split"] != "validation"]
    if not tests:
        return ["n/a"] * len(methods)
    longest = max(r["length"] for r in tests)
    split = next(r["split"] for r in tests if r["length"] == longest)
    values = collect(rows, metric)
    unfit = unfit_methods(rows)
    diverged = {method: cell for (method, _), cell in diverged_cells(rows).items()}
    cells = []
    for method in methods:
        mean = mean_std(values[(method, split, longest)])[0]
        cell = "n/a" if math.isnan(mean) else f"{mean:.3f}" + (" †" if method in unfit else "")
        cells.append(diverged.get(method, cell))
    return cells


def ruler_summary(all_results, folder: Path, page: Path, plots: bool = True) -> list[str]:
    """The opening of a page of several RULER tasks: exact match and item accuracy at 16x the training length."""
    legend = Legend(all_results[0].question.methods)
    with_rows = [r for r in all_results if r.rows]
    if not with_rows:  # a partial page without a whole method yet: its first section says what is missing
        return []
    methods = legend.order({row["method"] for r in with_rows for row in r.rows})
    tasks = [r.experiment.task.removeprefix("ruler_") for r in with_rows]
    header = ["| method | " + " | ".join(tasks) + " |", "|" + "---|" * (len(tasks) + 1)]

    def table(metric: str) -> list[str]:
        cells = [longest_cells(r.rows, methods, metric) for r in with_rows]
        return header + [f"| {m} | " + " | ".join(c[i] for c in cells) + " |" for i, m in enumerate(methods)]

    return [
        "## Summary: at 16x the training length",
        "",
        f"Mean over seeds at the longest test length (the needle tasks: over every depth). † did not fit the task "
        f"(validation exact match below {FIT_ACCURACY} in some seed). {METRICS}",
        "",
        "Exact match:",
        "",
        *table("full_seq_acc"),
        "",
        "Item accuracy:",
        "",
        *table("item_acc"),
        "",
    ]
