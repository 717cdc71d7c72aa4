"""The language-modelling page: bits per byte against evaluation length, and loss against position."""

from __future__ import annotations

import json
import math
import os
import re
from collections import defaultdict
from pathlib import Path

from ...utils.atomic import atomic_write, atomic_write_text
from ...utils.rows import read_rows
from ..tables import (
    color,
    discussion_lines,
    diverged_cells,
    fmt,
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


def bpb_table(rows: list[dict]) -> list[str]:
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
    for method in ordered({r["method"] for r in rows}):
        first, last = mean_std(bpb[(method, lengths[0])])[0], mean_std(bpb[(method, lengths[-1])])[0]
        key = (method, train_length)
        cells = [label(method), f"{lr[method]:g}", str(len(seeds[method]))]
        cells += [fmt(bpb[(method, n)]) for n in lengths]
        cells.append(f"{last / first:.3f}" if first and not math.isnan(first) else "n/a")
        cells.append(fmt([s / 60 for s in minutes[key]], 1))
        cells.append(fmt(speed[key], 0))
        if (method, lr[method]) in diverged:
            cells[3:] = [diverged[(method, lr[method])]] * (len(cells) - 3)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot(rows: list[dict], path: Path) -> None:
    """Left: bits per byte against evaluation length; right: loss against position at the longest length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bpb = values_by_length(rows, "non_overlapping", "bits_per_byte")
    lengths = evaluation_lengths(rows, bpb)
    longest = lengths[-1]
    methods = ordered({r["method"] for r in rows})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for method in methods:
        stats = [mean_std(bpb[(method, n)]) for n in lengths]
        left.errorbar(
            lengths,
            [m for m, _ in stats],
            yerr=[s for _, s in stats],
            marker="o",
            capsize=2,
            color=color(method),
            label=label(method),
        )
        buckets = defaultdict(list)
        for r in rows:
            match = POSITION.match(r["metric"])
            if match and r["method"] == method and r["split"] == "non_overlapping" and r["length"] == longest:
                buckets[(int(match.group(1)) + int(match.group(2))) / 2].append(r["value"])
        centres = sorted(buckets)
        right.plot(
            centres, [mean_std(buckets[c])[0] for c in centres], marker=".", color=color(method), label=label(method)
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
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)


def write_report(out, command: str = "", notes=None, markdown=None) -> Path:
    """Build results.md (or ``markdown``) and bits_per_byte.png in ``out`` from out/results.jsonl."""
    out = Path(out)
    rows, recorded = read_results(out, "tra lm compare")
    command, preset = command or recorded.get("command", ""), recorded.get("preset", "")
    markdown = Path(markdown) if markdown else out / "results.md"
    image = out / "bits_per_byte.png"
    plot(rows, image)
    config = rows[0]["config"]
    model = config["model"]
    sweep = read_rows(out / "sweep.jsonl")
    selected = json.loads((out / "selected_lrs.json").read_text()) if sweep else {}
    lr_note = learning_rate_note(
        rows,
        sweep,
        selected,
        agreed="The learning rate of every method is the one with the best validation bits per byte at the "
        "training length (windows from the start of the validation text) in the sweep below.",
        without_sweep="Warning: no learning-rate sweep was run for this page; every method used its preset "
        "rate, not one chosen on validation data, so this is not yet a fair comparison (rerun with --lrs).",
    )
    variants = variant_lines({r["method"] for r in rows})
    variants_note = " (and, for a named variant, the fields listed under Variants)" if variants else ""
    title = "Language modelling: bits per byte past the training length"
    lines = page_header(title, command, report_command(out, notes, markdown), rows, preset)
    lines += [
        f"Corpus {config['task_args']['corpus']}, tokenizer {config['task_args']['tokenizer']}; model "
        f"{model['n_layers']} layer{'s' * (model['n_layers'] != 1)}, d_model {model['d_model']}, "
        f"{model['n_heads']} heads; {config['steps']} steps of {config['batch_size']} x {config['length']} tokens. "
        f"Every method shares the model, data, seeds and step budget; only the attention differs"
        f"{variants_note}. {lr_note} "
        "Evaluation: non-overlapping windows over the end of the validation text, the same tokens at every length.",
        "",
        "## Bits per byte (mean ± std over seeds)",
        "",
        *bpb_table(rows),
        "",
        f"![bits per byte and loss against position]({os.path.relpath(image, markdown.parent)})",
        "",
        *variants,
    ]
    if sweep:
        table = sweep_table(sweep, selected, SELECTION_METRIC)
        lines += ["## Learning-rate sweep (validation bits per byte at the training length)", "", *table, ""]
    if notes:
        lines += [*discussion_lines(Path(notes).read_text()), ""]
    atomic_write_text(markdown, "\n".join(lines))
    return markdown
