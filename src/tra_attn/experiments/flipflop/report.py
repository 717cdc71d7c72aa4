"""The flip-flop page: tables and plot from result rows (JSONL); nothing here trains or evaluates a model.

``tra report DIR`` rebuilds DIR/results.md and DIR/accuracy.png from DIR/results.jsonl.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from ...data.synthetic.flipflop import FlipFlop
from ...utils.atomic import atomic_write, atomic_write_text
from ...utils.rows import read_rows
from ..bench.report import accuracy_table, budget_phrase
from ..fit import FIT_ACCURACY, unfit_methods
from ..tables import (
    NO_TEST_DATA,
    PRESET_LEARNING_RATES,
    collect,
    color,
    discussion_lines,
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
from .rows import upgrade_rows

__all__ = ["flipflop_columns", "markdown_table", "unfit_methods", "write_report"]


def flipflop_columns(rows: list[dict]) -> list[tuple[str, str, int]]:
    """(column title, split, length): IID/sparse/dense at the training length, then each split's longer lengths."""
    train_length = min(r["config"]["length"] for r in rows)
    cols = [(f"{split} ({train_length})", split, train_length) for split in ("iid", "sparse", "dense")]
    for split in ("iid", "sparse", "dense"):
        longer = sorted({r["length"] for r in rows if r["split"] == split and r["length"] > train_length})
        cols += [(f"{split} {n // train_length}x ({n})", split, n) for n in longer]
    return cols


def markdown_table(rows: list[dict], metric: str, with_time: bool) -> list[str]:
    """The accuracy table of every procedural task (``bench/report.py``) with flip-flop's columns."""
    return accuracy_table(rows, metric, with_time, flipflop_columns(rows))


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


def plot_flipflop(rows: list[dict], path: Path) -> None:
    """Left: full-sequence accuracy per split; right: accuracy against length. Mean and std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = flipflop_columns(rows)
    train_length = cols[0][2]
    bar_cols = [c for c in cols if not (c[1] == "iid" and c[2] > train_length)]  # the density shifts
    values = collect(rows, "full_seq_acc")
    methods = ordered({r["method"] for r in rows})
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        method_color, method_label = color(method), label(method)
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
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)


def write_report(
    out: str | Path,
    command: str = "",
    preset: str = "",
    notes: str | Path | None = None,
    markdown: str | Path | None = None,
) -> Path:
    """Build results.md (or ``markdown``) and accuracy.png in ``out`` from out/results.jsonl.

    ``command`` and ``preset`` default to those recorded in out/run.json by ``tra flipflop``.
    """
    out = Path(out)
    rows, recorded = read_results(out, "tra flipflop", upgrade_rows)
    command, preset = command or recorded.get("command", ""), preset or recorded.get("preset", "")
    learning_rates = recorded.get("learning_rates", PRESET_LEARNING_RATES)
    markdown = Path(markdown) if markdown else out / "results.md"
    plot = out / "accuracy.png"
    plot_flipflop(rows, plot)
    config = rows[0]["config"]
    sweep = upgrade_rows(read_rows(out / "sweep.jsonl"))
    selected = json.loads((out / "selected_lrs.json").read_text()) if sweep else {}
    lr_note = learning_rate_note(
        rows,
        sweep,
        selected,
        agreed="The learning rate of every method is the one selected on a held-out IID validation set by the "
        "sweep below, never on the test splits.",
        without_sweep=learning_rates,
    )
    budget = "step cap" if config.get("fit_accuracy") else "step budget"
    variants = variant_lines({r["method"] for r in rows})
    variants_note = " (and, for a named variant, the fields listed under Variants)" if variants else ""
    title = "Flip-flop language modelling: TRA, ablations and baselines"
    lines = page_header(title, command, report_command(out, notes, markdown), rows, preset)
    lines += [
        f"Model: {config['model']['n_layers']} layer{'s' * (config['model']['n_layers'] != 1)}, "
        f"d_model {config['model']['d_model']}, "
        f"{config['model']['n_heads']} heads, {config['model']['block_style']} blocks, SwiGLU MLP; "
        f"{training_phrase(config)}. "
        f"Every method shares the model, data, seeds and {budget}; only the attention differs{variants_note}. "
        f"{lr_note}",
        "",
        "## Full-sequence accuracy (mean ± std over seeds)",
        "",
        "A sequence counts only if every read bit is predicted correctly. Test sets are shared by all methods "
        "and seeds; every test sequence ends with a read; longer splits hold fewer sequences, with the same "
        "number of tokens as the training-length splits (see Test data). Training minutes include the "
        "periodic validation.",
        "",
        *markdown_table(rows, "full_seq_acc", with_time=True),
        "",
        *(
            [
                f"† did not fit the training task: final validation (IID) full-sequence accuracy below "
                f"{FIT_ACCURACY} in at least one seed. With the shared budget and learning rates chosen on "
                "validation data this is a fitting failure, not evidence about generalisation.",
                "",
            ]
            if unfit_methods(rows)
            else []
        ),
        f"![accuracy per split and per length]({os.path.relpath(plot, markdown.parent)})",
        "",
        *variants,
        "## Per-read accuracy",
        "",
        *markdown_table(rows, "token_acc", with_time=False),
        "",
        "## Test data",
        "",
        *data_statistics_table(rows),
        "",
    ]
    if sweep:
        table = sweep_table(sweep, selected, "full_seq_acc")
        lines += ["## Learning-rate sweep (validation full-sequence accuracy)", "", *table, ""]
    if notes:
        lines += [*discussion_lines(Path(notes).read_text()), ""]
    atomic_write_text(markdown, "\n".join(lines))
    return markdown
