"""The language-modelling section of a page: bits per byte against evaluation length, and loss against position."""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from pathlib import Path

from ..pages.plots import pyplot, save_figure
from ..pages.tables import Legend, diverged_cells, fmt, mean_std, methods_section, sweep_table
from .comparison import SELECTION_METRIC

POSITION = re.compile(r"^loss@(\d+)-(\d+)$")


def values_by_length(rows: list[dict], split: str, metric: str) -> dict[tuple[str, int], list[float]]:
    """The values of ``metric`` on ``split`` per (method, length), one per seed."""
    table = defaultdict(list)
    for r in rows:
        if r["split"] == split and r["metric"] == metric:
            table[(r["method"], r["length"])].append(r["value"])
    return table


def evaluation_lengths(rows: list[dict], bpb: dict[tuple[str, int], list[float]]) -> list[int]:
    """The evaluation lengths of ``bpb`` (``values_by_length``), or the training length if every run diverged."""
    return sorted({n for _, n in bpb}) or [rows[0]["config"]["length"]]


def bpb_table(rows: list[dict], legend: Legend) -> list[str]:
    """Bits per byte per method and evaluation length (mean ± std over seeds), and their training cost; a
    method whose training diverged shows "diverged" in place of its numbers."""
    bpb = values_by_length(rows, "non_overlapping", "bits_per_byte")
    lengths = evaluation_lengths(rows, bpb)
    train_length = min(lengths)
    minutes = values_by_length(rows, "validation", "train_seconds")
    speed = values_by_length(rows, "validation", "tokens_per_second")
    lr = {r["method"]: r["lr"] for r in rows}
    diverged = diverged_cells(rows)
    seeds = defaultdict(set)
    for r in rows:
        seeds[r["method"]].add(r["seed"])
    header = ["method", "lr", "seeds"] + [f"{n // train_length}x ({n})" for n in lengths]
    header += [f"{lengths[-1] // train_length}x / 1x", "train minutes", "tokens/s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in legend.order({r["method"] for r in rows}):
        first, last = mean_std(bpb[(method, lengths[0])])[0], mean_std(bpb[(method, lengths[-1])])[0]
        key = (method, train_length)
        cells = [method, f"{lr[method]:g}", str(len(seeds[method]))]
        cells += [fmt(bpb[(method, n)]) for n in lengths]
        cells.append(f"{last / first:.3f}" if first and not math.isnan(first) else "n/a")
        cells.append(fmt([s / 60 for s in minutes[key]], 1))
        cells.append(fmt(speed[key], 0))
        if (method, lr[method]) in diverged:
            cells[3:] = [diverged[(method, lr[method])]] * (len(cells) - 3)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot(rows: list[dict], legend: Legend, path: Path) -> None:
    """Left: bits per byte against evaluation length; right: loss against position at the longest length."""
    plt = pyplot()
    bpb = values_by_length(rows, "non_overlapping", "bits_per_byte")
    lengths = evaluation_lengths(rows, bpb)
    longest = lengths[-1]
    methods = legend.order({r["method"] for r in rows})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for method in methods:
        stats = [mean_std(bpb[(method, n)]) for n in lengths]
        left.errorbar(
            lengths,
            [m for m, _ in stats],
            yerr=[s for _, s in stats],
            marker="o",
            capsize=2,
            color=legend.color(method),
            label=method,
        )
        buckets = defaultdict(list)
        for r in rows:
            match = POSITION.match(r["metric"])
            if match and r["method"] == method and r["split"] == "non_overlapping" and r["length"] == longest:
                buckets[(int(match.group(1)) + int(match.group(2))) / 2].append(r["value"])
        centres = sorted(buckets)
        right.plot(
            centres, [mean_std(buckets[c])[0] for c in centres], marker=".", color=legend.color(method), label=method
        )
    for axis in (left, right):
        axis.axvline(lengths[0], color="k", linestyle="--", linewidth=1)
    left.set_xscale("log", base=2)
    left.set_xlabel("evaluation length (tokens); dashed: training length")
    left.set_ylabel("bits per byte")
    left.set_title("Bits per byte against evaluation length")
    right.set_xlabel(f"position in a {longest}-token window")
    right.set_ylabel("loss (nats per token)")
    right.set_title("Loss against position at the longest length")
    handles, names = left.get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(methods), 6), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save_figure(fig, path, dpi=110)


def lm_section(results, folder: Path, page: Path, level: str = "##", plots: bool = True) -> list[str]:
    """Corpus, model and recipe, methods, bits per byte per length, the plot and the sweep."""
    rows, legend = results.rows, Legend(results.question.methods)
    config = rows[0]["config"]
    model = config["model"]
    image = folder / "bits_per_byte.png"
    if plots:
        plot(rows, legend, image)
    lines = [
        f"Corpus {config['task_args']['corpus']}, tokenizer {config['task_args']['tokenizer']}; model "
        f"{model['n_layers']} layer{'s' * (model['n_layers'] != 1)}, d_model {model['d_model']}, "
        f"{model['n_heads']} heads; {config['steps']} steps of {config['batch_size']} x {config['length']} tokens. "
        "Every method shares the model, data, seeds and step budget; only the attention and what the methods table "
        "lists differ. Learning rates are chosen on validation bits per byte at the training length (windows from "
        "the start of the validation text). Evaluation: non-overlapping windows over the end of the validation "
        "text, the same tokens at every length.",
        "",
        *methods_section(results, level),
        f"{level} Bits per byte (mean ± std over seeds)",
        "",
        *bpb_table(rows, legend),
        "",
        f"![bits per byte and loss against position]({os.path.relpath(image, page.parent)})",
        "",
    ]
    if results.sweep:
        table = sweep_table(results.sweep, results.selected, SELECTION_METRIC, legend)
        lines += [f"{level} Learning-rate sweep (validation bits per byte at the training length)", "", *table, ""]
    return lines
