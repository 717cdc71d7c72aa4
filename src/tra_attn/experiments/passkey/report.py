"""The passkey page from result rows (JSONL): exact match per length, the length x depth grid per method (a
table and a heatmap), per-digit accuracy, the test data and the sweep. Nothing here trains or evaluates.

``tra report DIR`` rebuilds DIR/results.md and DIR/grid.png from DIR/results.jsonl.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import defaultdict
from pathlib import Path

from ...utils.atomic import atomic_write, atomic_write_text
from ...utils.rows import read_rows
from ..bench.report import accuracy_table, data_table, recipe_line
from ..fit import FIT_ACCURACY, unfit_methods
from ..tables import (
    PRESET_LEARNING_RATES,
    collect,
    discussion_lines,
    diverged_cells,
    label,
    learning_rate_note,
    mean_std,
    ordered,
    page_header,
    read_results,
    report_command,
    sweep_table,
    variant_lines,
)

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


def length_table(rows: list[dict], metric: str, with_fit: bool) -> list[str]:
    """``metric`` per method and test length, averaged over depths (mean ± std over seeds)."""
    train_length = rows[0]["config"]["length"]
    cols = [(length_title(n, train_length), ALL_DEPTHS, n) for n in test_lengths(rows)]
    return accuracy_table(depth_means(rows), metric, with_fit, cols)


def grid(rows: list[dict], method: str) -> dict[tuple[str, int], float]:
    """Exact match of ``method`` per (depth split, length): the mean over seeds."""
    values = collect(rows, "full_seq_acc")
    return {(s, n): mean_std(values[(method, s, n)])[0] for s in test_depths(rows) for n in test_lengths(rows)}


def grid_tables(rows: list[dict]) -> list[str]:
    """Per method, a table of depths (rows) by lengths (columns); a diverged method says so instead."""
    train_length = rows[0]["config"]["length"]
    lengths, depths = test_lengths(rows), test_depths(rows)
    diverged = {method: cell for (method, _), cell in diverged_cells(rows).items()}
    unfit = unfit_methods(rows)
    lines = []
    for method in ordered({r["method"] for r in rows}):
        title = (
            label(method) + (" †" if method in unfit else "") + (f" ({diverged[method]})" if method in diverged else "")
        )
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


def plot_grid(rows: list[dict], path: Path) -> None:
    """A heatmap of exact match per method: depth down, length across, mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train_length = rows[0]["config"]["length"]
    lengths, depths = test_lengths(rows), test_depths(rows)
    methods = [m for m in ordered({r["method"] for r in rows}) if tested(rows, m)]
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
        ax.set_title(label(method), fontsize=8)
    fig.suptitle(f"{rows[0]['task']}: exact match by length (across) and depth (down)", fontsize=9)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=80, format="png"))
    plt.close(fig)


def write_report(
    out: str | Path, command: str = "", preset: str = "", notes: str | Path | None = None, markdown=None
) -> Path:
    """Build results.md (or ``markdown``) and grid.png in ``out`` from out/results.jsonl."""
    out = Path(out)
    rows, recorded = read_results(out, "tra compare passkey")
    command, preset = command or recorded.get("command", ""), preset or recorded.get("preset", "")
    markdown = Path(markdown) if markdown else out / "results.md"
    sweep = read_rows(out / "sweep.jsonl")
    selected = json.loads((out / "selected_lrs.json").read_text()) if sweep else {}
    lines = page_header(
        f"{rows[0]['task']}: TRA, ablations and baselines", command, report_command(out, notes, markdown), rows, preset
    )
    lines += variant_lines({r["method"] for r in rows})
    lr_note = learning_rate_note(
        rows,
        sweep,
        selected,
        agreed="Each method's learning rate is the one selected on held-out validation data (training "
        "distribution: the key at a uniform depth) by the sweep below, never on the test grid.",
        without_sweep=recorded.get("learning_rates", PRESET_LEARNING_RATES),
    )
    sizes = cell_sizes(rows)
    lines += [recipe_line(rows) + " " + lr_note, ""]
    lines += [
        "Exact match: a sequence counts only if every digit of the key is right (the full-sequence accuracy). "
        "The test grid puts the key at depths 0%, 25%, 50%, 75% and 100% of the filler (0%: the sequence opens "
        "with it; 100%: just before the question) at 1x to 16x the training length; the depths of one length share "
        f"their keys and filler. {sizes}",
        "",
        "## Exact match per length (mean over depths; mean ± std over seeds)",
        "",
        *length_table(rows, "full_seq_acc", with_fit=True),
        "",
    ]
    if unfit_methods(rows):
        lines += [
            f"† did not fit: final validation exact match below {FIT_ACCURACY} in at least one seed (its grid says "
            "nothing about retrieval at length).",
            "",
        ]
    plot = out / "grid.png"
    plot_grid(rows, plot)
    lines += ["## Exact match by length and depth (mean over seeds)", "", *grid_tables(rows)]
    lines += [f"![exact match by length and depth]({os.path.relpath(plot, markdown.parent)})", ""]
    lines += ["## Per-digit accuracy (mean over depths)", "", *length_table(rows, "token_acc", with_fit=False), ""]
    lines += ["## Test data", "", *data_table(rows), ""]
    if sweep:
        lines += ["## Learning-rate sweep (validation exact match)", ""]
        lines += [*sweep_table(sweep, selected, "full_seq_acc"), ""]
    if notes:
        lines += [*discussion_lines(Path(notes).read_text()), ""]
    atomic_write_text(markdown, "\n".join(lines))
    return markdown
