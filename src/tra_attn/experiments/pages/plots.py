"""The plots every page shares: matplotlib without a display, a figure written atomically, full-sequence accuracy per
test split as bars, and exact match by length and depth as heatmaps."""

from __future__ import annotations

import math
from pathlib import Path

from ...utils.atomic import atomic_write
from .accuracy import columns
from .grid import depth_of, grid, test_depths, test_lengths, tested
from .tables import Legend, collect, mean_std


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display), imported only when a page draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int) -> None:
    """Write ``fig`` to ``path`` as a PNG (atomically: a failure leaves the old plot) and release it."""
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
    pyplot().close(fig)


def plot_accuracy(rows: list[dict], legend: Legend, path: Path) -> None:
    """Full-sequence accuracy per test split and method (mean and std over seeds)."""
    plt = pyplot()
    cols = columns(rows)
    values = collect(rows, "full_seq_acc")
    methods = legend.order({r["method"] for r in rows})
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(cols)), 4.5))
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        stats = [mean_std(values[(method, s, n)]) for _, s, n in cols]
        ax.bar(
            [j + (i - (len(methods) - 1) / 2) * width for j in range(len(cols))],
            [m for m, _ in stats],
            width,
            yerr=[s for _, s in stats],
            color=legend.color(method),
            label=method,
            capsize=2,
        )
    ax.set_xticks(range(len(cols)), [c[0] for c in cols], fontsize=8)
    ax.set_ylabel("full-sequence accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{rows[0]['task']}: full-sequence accuracy per test split")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(len(methods), 5), fontsize=8, frameon=False)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def plot_grid(rows: list[dict], legend: Legend, path: Path) -> None:
    """A heatmap of exact match per method: depth down, length across, mean over seeds."""
    plt = pyplot()
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
    save_figure(fig, path, dpi=80)
