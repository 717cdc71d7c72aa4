"""The section of a procedural task on a page (one task, or one of several), from result rows.

Nothing here trains or evaluates a model: it tabulates the rows a question's runs hold (``engine.Results``).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from ...data import make_task
from ...utils.atomic import atomic_write
from ..fit import FIT_ACCURACY, steps_to_fit, steps_to_fit_cell, unfit_methods
from ..tables import (
    NO_TEST_DATA,
    Legend,
    collect,
    diverged_cells,
    fmt,
    mean_std,
    methods_section,
    sweep_table,
)

Column = tuple[str, str, int]  # (title, split, length)


def task_of(rows: list[dict]):
    """The task the rows were trained on, with its parameters."""
    config = rows[0]["config"]
    return make_task(config["task"], **config["task_args"])


def columns(rows: list[dict]) -> list[Column]:
    """Every test split in the order the task lists them: '<split> (<length>)', or '<split> Nx (<length>)'
    beyond the training length."""
    train_length = rows[0]["config"]["length"]
    found = {(r["split"], r["length"]) for r in rows if r["split"] != "validation"}
    cols = []
    for test in task_of(rows).eval_splits(train_length, 1):
        length = test.length or test.batch.tokens.shape[1]
        if (test.split, length) in found or not found:  # none found: every run diverged
            times = f" {length // train_length}x" if length > train_length else ""
            cols.append((f"{test.split}{times} ({length})", test.split, length))
    return cols


def accuracy_table(
    rows: list[dict], legend: Legend, metric: str = "full_seq_acc", with_fit: bool = True, cols=None
) -> list[str]:
    """Mean ± std over seeds per method and test split (``cols``, default ``columns(rows)``); with
    ``with_fit``, the median training minutes and, for runs trained to fit, each seed's steps to fit. A
    method whose training diverged shows "diverged" in place of its numbers."""
    cols = cols or columns(rows)
    unfit = unfit_methods(rows)
    values = collect(rows, metric)
    seconds = collect(rows, "train_seconds")
    fit_steps = steps_to_fit(rows) if with_fit else {}
    lr = {r["method"]: r["lr"] for r in rows}
    diverged = diverged_cells(rows)
    seeds = defaultdict(set)
    for r in rows:
        seeds[r["method"]].add(r["seed"])
    header = ["method", "lr", "seeds"] + [c[0] for c in cols] + (["train minutes (median)"] if with_fit else [])
    header += ["steps to fit (per seed)"] if fit_steps else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    train_length = rows[0]["config"]["length"]
    for method in legend.order({r["method"] for r in rows}):
        cells = [method + (" †" if method in unfit else ""), f"{lr[method]:g}", str(len(seeds[method]))]
        cells += [fmt(values[(method, split, length)]) for _, split, length in cols]
        if with_fit:
            minutes = sorted(s / 60 for s in seconds[(method, "validation", train_length)])
            cells.append(f"{minutes[len(minutes) // 2]:.1f}" if minutes else "n/a")  # the upper median
        if fit_steps:
            cells.append(steps_to_fit_cell(fit_steps.get(method, [])))
        if (method, lr[method]) in diverged:
            cells[3:] = [diverged[(method, lr[method])]] * (len(cells) - 3)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def per_seed_table(rows: list[dict], legend: Legend, col: Column, metric: str = "full_seq_acc") -> list[str]:
    """Per method, seed by seed: the validation value (the rate's choice and the fit) and the value at ``col`` (the
    longest test split, say), in seed order."""
    title, split, length = col
    values = defaultdict(dict)
    for r in rows:
        if r["metric"] == metric and (r["split"], r["length"]) in (("validation", r["length"]), (split, length)):
            values[(r["method"], r["split"] == "validation")][r["seed"]] = r["value"]
    lines = [f"| method | seeds | validation | {title} |", "|---|---|---|---|"]
    for method in legend.order({r["method"] for r in rows}):
        seeds = sorted(values[(method, True)])
        cells = [", ".join(f"{values[(method, v)].get(s, float('nan')):.3f}" for s in seeds) for v in (True, False)]
        lines.append(f"| {method} | {', '.join(map(str, seeds))} | {cells[0]} | {cells[1]} |")
    return lines


def per_seed_section(rows: list[dict], legend: Legend, col: Column, level: str) -> list[str]:
    return [
        f"{level} Per seed",
        "",
        f"Full-sequence accuracy seed by seed: on the validation set (training distribution) and at {col[0]}.",
        "",
        *per_seed_table(rows, legend, col),
        "",
    ]


def data_table(rows: list[dict]) -> list[str]:
    """The statistics of every test split (regenerated from its seed) and the parameters that differ."""
    task = task_of(rows)
    train_length = rows[0]["config"]["length"]
    sequences = max((int(r["value"]) for r in rows if r["metric"] == "sequences"), default=0)
    if not sequences:
        return [NO_TEST_DATA]
    tests = task.eval_splits(train_length, sequences)
    varying = [k for k in tests[0].params if len({json.dumps(t.params[k]) for t in tests}) > 1]
    stats = [task.statistics(t.batch) for t in tests]
    keys = [k for k in stats[0] if all(k in s for s in stats)]
    lines = ["| split | " + " | ".join(varying + keys) + " |", "|" + "---|" * (1 + len(varying) + len(keys))]
    for test, s in zip(tests, stats):
        cells = [str(test.params[k]) for k in varying]
        cells += [f"{s[k]:.3g}" if isinstance(s[k], float) else str(s[k]) for k in keys]
        lines.append(f"| {test.split} | " + " | ".join(cells) + " |")
    return lines


def plot_accuracy(rows: list[dict], legend: Legend, path: Path) -> None:
    """Full-sequence accuracy per test split and method (mean and std over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)


def budget_phrase(config: dict) -> str:
    """'N steps', or for a run trained to fit, when it stops and its cap."""
    if not config.get("fit_accuracy"):
        return f"{config['steps']} steps"
    return (
        f"trained to fit: each run stops at the first validation (every {config['eval_every']} steps, "
        f"{config['eval_sequences']} held-out sequences) with full-sequence accuracy >= {config['fit_accuracy']}, "
        f"at most {config['steps']} steps"
    )


def recipe_line(rows: list[dict]) -> str:
    config = rows[0]["config"]
    model = config["model"]
    args = ", ".join(f"{k}={json.dumps(v)}" for k, v in config["task_args"].items()) or "its defaults"
    fit = budget_phrase(config)
    return (
        f"Task `{config['task']}` ({args}), {config['length']}-token training sequences. Model: "
        f"{model['n_layers']} layer{'s' * (model['n_layers'] != 1)}, d_model {model['d_model']}, "
        f"{model['n_heads']} heads, {model['block_style']} blocks, SwiGLU MLP. Training: batch "
        f"{config['batch_size']}, AdamW (weight decay {config['weight_decay']}), "
        f"cosine schedule over the cap with {config['warmup_steps']} warm-up steps, gradient clipping "
        f"{config['grad_clip'] or 'off'}; {fit}. {SHARED}"
    )


SHARED = (
    "Every method shares the model, data, seeds and budget; only the attention and what the methods table lists "
    "differ. Learning rates are chosen on held-out validation data (training distribution), never on the test splits."
)


def task_section(results, folder: Path, page: Path, level: str = "##", plots: bool = True) -> list[str]:
    """Recipe, methods, tables, plot, test data and sweep of one procedural task (``engine.Results``); the plot is
    ``folder/accuracy.png``, or ``folder/<task>_accuracy.png`` on a page of several tasks (``level`` "###")."""
    rows, legend = results.rows, Legend(results.question.methods)
    lines = [recipe_line(rows), ""]
    lines += methods_section(results, level)
    lines += [f"{level} Full-sequence accuracy (mean ± std over seeds)", "", *accuracy_table(rows, legend), ""]
    if unfit_methods(rows):
        lines += [
            f"† did not fit: final validation full-sequence accuracy below {FIT_ACCURACY} in at least one seed "
            "(its out-of-distribution numbers are not evidence about generalisation).",
            "",
        ]
    lines += per_seed_section(rows, legend, columns(rows)[-1], level)
    plot = folder / (f"{results.experiment.task}_accuracy.png" if level != "##" else "accuracy.png")
    if plots:
        plot_accuracy(rows, legend, plot)
    lines += [f"![accuracy per split]({os.path.relpath(plot, page.parent)})", ""]
    lines += [f"{level} Per-token accuracy", "", *accuracy_table(rows, legend, "token_acc", with_fit=False), ""]
    lines += [f"{level} Test data", "", *data_table(rows), ""]
    if results.sweep:
        lines += [f"{level} Learning-rate sweep (validation full-sequence accuracy)", ""]
        lines += [*sweep_table(results.sweep, results.selected, "full_seq_acc", legend), ""]
    return lines


def summary_table(by_task: dict[str, list[dict]], legend: Legend) -> list[str]:
    """Per task and method: the mean full-sequence accuracy over every test split except IID at the training
    length († a method that did not fit)."""
    methods = legend.order({r["method"] for rows in by_task.values() for r in rows})
    lines = ["| task | " + " | ".join(methods) + " |", "|" + "---|" * (len(methods) + 1)]
    for task, rows in by_task.items():
        train_length = rows[0]["config"]["length"]
        unfit = unfit_methods(rows)
        acc = collect(rows, "full_seq_acc")
        diverged = {method: cell for (method, _), cell in diverged_cells(rows).items()}
        ood = [(s, n) for _, s, n in columns(rows) if (s, n) != ("iid", train_length)]
        cells = []
        for method in methods:
            per_split = [mean_std(acc[(method, s, n)])[0] for s, n in ood if acc[(method, s, n)]]
            mean = sum(per_split) / len(per_split) if per_split else float("nan")
            cell = "n/a" if mean != mean else f"{mean:.3f}" + (" †" if method in unfit else "")
            cells.append(diverged.get(method, cell))
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return lines


def suite_summary(all_results) -> list[str]:
    """The summary that opens a page of several procedural tasks."""
    by_task = {r.experiment.task: r.rows for r in all_results}
    legend = Legend(all_results[0].question.methods)
    return [
        "## Summary: mean full-sequence accuracy over each task's out-of-distribution splits",
        "",
        "Every test split except IID at the training length, averaged (per-split numbers below). "
        f"† did not fit the task (validation accuracy below {FIT_ACCURACY} in some seed).",
        "",
        *summary_table(by_task, legend),
        "",
    ]
