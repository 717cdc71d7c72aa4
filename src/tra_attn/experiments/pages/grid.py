"""The length x depth grid of a retrieval task (a key or needles hidden at depths of a filler): the rows of every
depth averaged into one per length, the tables per length and per method, and the sizes of its cells. Nothing here
trains or evaluates."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from ..fit import unfit_methods
from .accuracy import accuracy_table
from .tables import Legend, collect, diverged_cells, mean_std

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


def longest_column(rows: list[dict]) -> tuple[str, str, int]:
    """The column of the longest test length, averaged over depths (the training length without test rows)."""
    train_length = rows[0]["config"]["length"]
    longest = max(test_lengths(rows), default=train_length)
    return length_title(longest, train_length), ALL_DEPTHS, longest


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
