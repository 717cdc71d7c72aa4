"""Passkey's section of a page from result rows: exact match per length, the length x depth grid per method (a
table and a heatmap), per-digit accuracy, the test data and the sweep. Nothing here trains or evaluates."""

from __future__ import annotations

import math
import os
import statistics
from collections import defaultdict
from pathlib import Path

from ...utils.atomic import atomic_write
from ..fit import FIT_ACCURACY, unfit_methods
from ..suite.report import accuracy_table, data_table, per_seed_section, recipe_line
from ..tables import Legend, collect, diverged_cells, mean_std, methods_section, sweep_table

ALL_DEPTHS = "all depths"  # the split of the rows averaged over depths


def depth_of(split: str) -> float:
    """'depth0.25' -> 0.25."""
    return float(split.removeprefix("depth"))


def depth_means(rows: list[dict]) -> list[dict]:
    """The validation rows, then the test rows averaged over depths: one per (method, lr, seed, length,
    metric), split ALL_DEPTHS (every depth of a length has as many sequences, so this is the pooled value)."""
    groups = defaultdict(list)
    for r in rows:
        if r["split"] != "validation":
            groups[(r["method"], r["lr"], r["seed"], r["length"], r["metric"])].append(r)
    means = [
        {**group[0], "split": ALL_DEPTHS, "value": statistics.fmean(r["value"] for r in group)}
        for group in groups.values()
    ]
    return [r for r in rows if r["split"] == "validation"] + means


def test_lengths(rows: list[dict]) -> list[int]:
    return sorted({r["length"] for r in rows if r["split"] != "validation"})


def test_depths(rows: list[dict]) -> list[str]:
    return sorted({r["split"] for r in rows if r["split"] != "validation"}, key=depth_of)


def tested(rows: list[dict], method: str) -> bool:
    """Whether ``method`` has test rows (a method whose every seed diverged has none)."""
    return any(r["method"] == method and r["split"] != "validation" for r in rows)


def length_title(length: int, train_length: int) -> str:
    return f"{length // train_length}x ({length})"


def length_table(rows: list[dict], legend: Legend, metric: str, with_fit: bool) -> list[str]:
    """``metric`` per method and test length, averaged over depths (mean ± std over seeds)."""
    train_length = rows[0]["config"]["length"]
    cols = [(length_title(n, train_length), ALL_DEPTHS, n) for n in test_lengths(rows)]
    return accuracy_table(depth_means(rows), legend, metric, with_fit, cols)


def grid(rows: list[dict], method: str) -> dict[tuple[str, int], float]:
    """Exact match of ``method`` per (depth split, length): the mean over seeds."""
    values = collect(rows, "full_seq_acc")
    return {(s, n): mean_std(values[(method, s, n)])[0] for s in test_depths(rows) for n in test_lengths(rows)}


def grid_tables(rows: list[dict], legend: Legend) -> list[str]:
    """Per method, a table of depths (rows) by lengths (columns); a diverged method says so instead."""
    train_length = rows[0]["config"]["length"]
    lengths, depths = test_lengths(rows), test_depths(rows)
    diverged = {method: cell for (method, _), cell in diverged_cells(rows).items()}
    unfit = unfit_methods(rows)
    lines = []
    for method in legend.order({r["method"] for r in rows}):
        title = method + (" †" if method in unfit else "") + (f" ({diverged[method]})" if method in diverged else "")
        if not tested(rows, method):
            lines += [f"**{title}**: no test rows", ""]
            continue
        cells = grid(rows, method)
        lines += [f"**{title}**", "", "| depth | " + " | ".join(length_title(n, train_length) for n in lengths) + " |"]
        lines += ["|" + "---|" * (len(lengths) + 1)]
        for depth in depths:
            values = [cells[(depth, n)] for n in lengths]
            shown = ["n/a" if math.isnan(v) else f"{v:.2f}" for v in values]
            lines.append(f"| {depth_of(depth):.0%} | " + " | ".join(shown) + " |")
        lines.append("")
    return lines


def cell_sizes(rows: list[dict]) -> str:
    """'Sequences per cell (each seed): 128 at 64 tokens, 64 at 128 tokens, ...', or '' without test rows."""
    sizes = {}
    for r in rows:
        if r["metric"] == "sequences" and r["split"] != "validation":
            sizes[r["length"]] = max(sizes.get(r["length"], 0), int(r["value"]))
    if not sizes:
        return ""
    return "Sequences per cell (each seed): " + ", ".join(f"{sizes[n]} at {n} tokens" for n in sorted(sizes)) + "."


def plot_grid(rows: list[dict], legend: Legend, path: Path) -> None:
    """A heatmap of exact match per method: depth down, length across, mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train_length = rows[0]["config"]["length"]
    lengths, depths = test_lengths(rows), test_depths(rows)
    methods = [m for m in legend.order({r["method"] for r in rows}) if tested(rows, m)]
    cols = min(len(methods), 5) or 1
    nrows = max(1, math.ceil(len(methods) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(2.2 * cols, 2.0 * nrows + 0.3), squeeze=False)
    for ax in axes.flat[len(methods) :]:
        ax.axis("off")
    for ax, method in zip(axes.flat, methods):
        cells = grid(rows, method)
        values = [[cells[(d, n)] for n in lengths] for d in depths]
        ax.imshow(values, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                ax.text(j, i, "" if math.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=6)
        ax.set_xticks(range(len(lengths)), [f"{n // train_length}x" for n in lengths], fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{depth_of(d):.0%}" for d in depths], fontsize=7)
        ax.set_title(method, fontsize=8)
    fig.suptitle(f"{rows[0]['task']}: exact match by length (across) and depth (down)", fontsize=9)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=80, format="png"))
    plt.close(fig)


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
    if unfit_methods(rows):
        lines += [
            f"† did not fit: final validation exact match below {FIT_ACCURACY} in at least one seed (its grid says "
            "nothing about retrieval at length).",
            "",
        ]
    train_length = rows[0]["config"]["length"]
    longest = test_lengths(rows)[-1] if test_lengths(rows) else train_length
    lines += per_seed_section(
        depth_means(rows), legend, (length_title(longest, train_length), ALL_DEPTHS, longest), level
    )
    plot = folder / "grid.png"
    if plots:
        plot_grid(rows, legend, plot)
    lines += [f"{level} Exact match by length and depth (mean over seeds)", "", *grid_tables(rows, legend)]
    lines += [f"![exact match by length and depth]({os.path.relpath(plot, page.parent)})", ""]
    lines += [f"{level} Per-digit accuracy (mean over depths)", ""]
    lines += [*length_table(rows, legend, "token_acc", with_fit=False), ""]
    lines += [f"{level} Test data", "", *data_table(rows), ""]
    if results.sweep:
        lines += [f"{level} Learning-rate sweep (validation exact match)", ""]
        lines += [*sweep_table(results.sweep, results.selected, "full_seq_acc", legend), ""]
    return lines
