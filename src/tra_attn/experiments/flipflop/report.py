"""Flip-flop's section of a page: tables and plot from result rows; nothing here trains or evaluates a model."""

from __future__ import annotations

import math
import os
from pathlib import Path

from ...data.synthetic.flipflop import FlipFlop
from ..fit import FIT_ACCURACY, unfit_methods
from ..pages.accuracy import SHARED, accuracy_table, budget_phrase, per_seed_section, sweep_section
from ..pages.plots import pyplot, save_figure
from ..pages.tables import NO_TEST_DATA, Legend, collect, mean_std, methods_section

__all__ = ["flipflop_columns", "flipflop_section", "markdown_table"]


def flipflop_columns(rows: list[dict]) -> list[tuple[str, str, int]]:
    """(column title, split, length): IID/sparse/dense at the training length, then each split's longer lengths."""
    train_length = min(r["config"]["length"] for r in rows)
    cols = [(f"{split} ({train_length})", split, train_length) for split in ("iid", "sparse", "dense")]
    for split in ("iid", "sparse", "dense"):
        longer = sorted({r["length"] for r in rows if r["split"] == split and r["length"] > train_length})
        cols += [(f"{split} {n // train_length}x ({n})", split, n) for n in longer]
    return cols


def markdown_table(rows: list[dict], legend: Legend, metric: str, with_time: bool) -> list[str]:
    """The accuracy table of every procedural task (``pages/accuracy.py``) with flip-flop's columns."""
    return accuracy_table(rows, legend, metric, with_time, flipflop_columns(rows))


def training_phrase(config: dict) -> str:
    """The recipe: a fixed number of steps, or trained to fit within a cap (then the schedule spans the cap)."""
    data = f"{config['length']}-token FFL({config['task_args']['p_ignore']}) sequences"
    optimiser = f"AdamW (weight decay {config['weight_decay']}), cosine schedule"
    clip = f"gradient clipping {config['grad_clip'] or 'off'}"
    if not config.get("fit_accuracy"):
        return (
            f"training: {config['steps']} steps of batch {config['batch_size']} on {data}, {optimiser} "
            f"with {config['warmup_steps']} warm-up steps, {clip}"
        )
    return (
        f"training: batch {config['batch_size']} of {data}, {optimiser} over the cap with "
        f"{config['warmup_steps']} warm-up steps, {clip}; {budget_phrase(config)}"
    )


def data_statistics_table(rows: list[dict]) -> list[str]:
    """Reads per sequence and write-to-read gaps of every test split (regenerated from its seed)."""
    train_length = min(r["config"]["length"] for r in rows)
    sequences = max((int(r["value"]) for r in rows if r["metric"] == "sequences"), default=0)
    if not sequences:
        return [NO_TEST_DATA]
    lines = [
        "| split | p_ignore | length | sequences | reads / sequence | mean gap (tokens) | max gap (tokens) |",
        "|---|---|---|---|---|---|---|",
    ]
    task = FlipFlop()
    for test in task.eval_splits(train_length, sequences):
        s = task.statistics(test.batch)
        lines.append(
            f"| {test.split} | {test.params['p_ignore']} | {s['length']} | {s['sequences']} | "
            f"{s['reads_per_sequence']:.1f} | "
            f"{s['mean_gap']:.1f} | {s['max_gap']:.0f} |"
        )
    return lines


def plot_flipflop(rows: list[dict], legend: Legend, path: Path) -> None:
    """Left: full-sequence accuracy per split; right: accuracy against length. Mean and std over seeds."""
    plt = pyplot()
    cols = flipflop_columns(rows)
    train_length = cols[0][2]
    bar_cols = [c for c in cols if not (c[1] == "iid" and c[2] > train_length)]  # the density shifts
    values = collect(rows, "full_seq_acc")
    methods = legend.order({r["method"] for r in rows})
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        method_color, method_label = legend.color(method), method
        split_stats = [mean_std(values[(method, s, n)]) for _, s, n in bar_cols]
        left.bar(
            [j + (i - (len(methods) - 1) / 2) * width for j in range(len(bar_cols))],
            [m for m, _ in split_stats],
            width,
            yerr=[s for _, s in split_stats],
            color=method_color,
            label=method_label,
            capsize=2,
        )
        length_cols = [(n, mean_std(values[(method, "iid", n)])) for _, s, n in cols if s == "iid"]
        right.errorbar(
            [n for n, _ in length_cols],
            [m for _, (m, _) in length_cols],
            yerr=[s for _, (_, s) in length_cols],
            color=method_color,
            marker="o",
            label=method_label,
            capsize=2,
        )
    left.set_xticks(range(len(bar_cols)), [c[0] for c in bar_cols])
    left.set_ylabel("full-sequence accuracy")
    left.set_ylim(0, 1.02)
    left.set_title("IID, sparse and dense flip-flop")
    right.axvline(train_length, color="k", linestyle="--", linewidth=1)
    right.set_xscale("log", base=2)
    right.set_xlabel("test sequence length (tokens); dashed: training length")
    right.set_ylim(0, 1.02)
    right.set_title("IID FFL(0.8) at longer lengths")
    handles, labels = left.get_legend_handles_labels()
    rows_of_legend = math.ceil(len(methods) / 5)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(methods), 5), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.06 * rows_of_legend, 1, 1))  # room for the legend below both panels
    save_figure(fig, path, dpi=110)


def flipflop_section(results, folder: Path, page: Path, level: str = "##", plots: bool = True) -> list[str]:
    """Model and recipe, methods, accuracy tables, plot, per-read accuracy, test data and sweep."""
    rows, legend = results.rows, Legend(results.question.methods)
    config = rows[0]["config"]
    model = config["model"]
    plot = folder / "accuracy.png"
    if plots:
        plot_flipflop(rows, legend, plot)
    lines = [
        f"Model: {model['n_layers']} layer{'s' * (model['n_layers'] != 1)}, d_model {model['d_model']}, "
        f"{model['n_heads']} heads, {model['block_style']} blocks, SwiGLU MLP; {training_phrase(config)}. {SHARED}",
        "",
        *methods_section(results, level),
        f"{level} Full-sequence accuracy (mean ± std over seeds)",
        "",
        "A sequence counts only if every read bit is predicted correctly. Test sets are shared by all methods "
        "and seeds; every test sequence ends with a read; longer splits hold fewer sequences, with the same "
        "number of tokens as the training-length splits (see Test data). Training minutes include the "
        "periodic validation.",
        "",
        *markdown_table(rows, legend, "full_seq_acc", with_time=True),
        "",
    ]
    if unfit_methods(rows):
        lines += [
            f"† did not fit the training task: final validation (IID) full-sequence accuracy below {FIT_ACCURACY} "
            "in at least one seed. With the shared budget and learning rates chosen on validation data this is a "
            "fitting failure, not evidence about generalisation.",
            "",
        ]
    iid = [c for c in flipflop_columns(rows) if c[1] == "iid"]
    lines += per_seed_section(rows, legend, iid[-1], level)
    lines += [f"![accuracy per split and per length]({os.path.relpath(plot, page.parent)})", ""]
    lines += [f"{level} Per-read accuracy", "", *markdown_table(rows, legend, "token_acc", with_time=False), ""]
    lines += [f"{level} Test data", "", *data_statistics_table(rows), ""]
    return lines + sweep_section(results, level, "full-sequence accuracy")
