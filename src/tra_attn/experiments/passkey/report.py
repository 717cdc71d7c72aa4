"""Passkey's section of a page from result rows: exact match per length, the length x depth grid per method (a
table and a heatmap), per-digit accuracy, the test data and the sweep. Nothing here trains or evaluates."""

from __future__ import annotations

import os
from pathlib import Path

from ..pages.accuracy import per_seed_section, recipe_line, sweep_section, test_data_section, unfit_note
from ..pages.grid import cell_sizes, depth_means, grid_tables, length_table, longest_column
from ..pages.plots import plot_grid
from ..pages.tables import Legend, methods_section


def passkey_section(results, folder: Path, page: Path, level: str = "##", plots: bool = True) -> list[str]:
    """Recipe, methods, exact match per length, the grids, per-digit accuracy, test data and sweep."""
    rows, legend = results.rows, Legend(results.question.methods)
    lines = [recipe_line(rows), ""]
    lines += methods_section(results, level)
    lines += [
        "Exact match: a sequence counts only if every digit of the key is right (the full-sequence accuracy). "
        "The test grid puts the key at depths 0%, 25%, 50%, 75% and 100% of the filler (0%: the sequence opens "
        "with it; 100%: just before the question) at 1x to 16x the training length; the depths of one length share "
        f"their keys and filler. {cell_sizes(rows)}",
        "",
        f"{level} Exact match per length (mean over depths; mean ± std over seeds)",
        "",
        *length_table(rows, legend, "full_seq_acc", with_fit=True),
        "",
    ]
    lines += unfit_note(rows, "exact match", "its grid says nothing about retrieval at length")
    lines += per_seed_section(depth_means(rows), legend, longest_column(rows), level)
    plot = folder / "grid.png"
    if plots:
        plot_grid(rows, legend, plot)
    lines += [f"{level} Exact match by length and depth (mean over seeds)", "", *grid_tables(rows, legend)]
    lines += [f"![exact match by length and depth]({os.path.relpath(plot, page.parent)})", ""]
    lines += [f"{level} Per-digit accuracy (mean over depths)", ""]
    lines += [*length_table(rows, legend, "token_acc", with_fit=False), ""]
    return lines + test_data_section(rows, level) + sweep_section(results, level, "exact match")
