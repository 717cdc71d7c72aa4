"""The parts of a procedural task's section on a page, from result rows (``engine.Results``): the recipe, accuracy
per test split, per seed, the test data, the sweep and the note on methods that did not fit. Nothing here trains or
evaluates a model."""

from __future__ import annotations

import json
from collections import defaultdict

from ...data import make_task
from ..fit import FIT_ACCURACY, steps_to_fit, steps_to_fit_cell, unfit_methods
from .tables import NO_TEST_DATA, Legend, collect, diverged_cells, fmt, sweep_table

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


def unfit_note(rows: list[dict], measure: str, why: str) -> list[str]:
    """The note under a table marking methods that did not fit († in the table), or nothing when every method fitted:
    ``measure`` names the validation value, ``why`` what their numbers are not."""
    if not unfit_methods(rows):
        return []
    return [f"† did not fit: final validation {measure} below {FIT_ACCURACY} in at least one seed ({why}).", ""]


def test_data_section(rows: list[dict], level: str) -> list[str]:
    return [f"{level} Test data", "", *data_table(rows), ""]


def sweep_section(results, level: str, measure: str) -> list[str]:
    """The learning-rate sweep on validation ``measure`` (full-sequence accuracy), or nothing without a sweep."""
    if not results.sweep:
        return []
    table = sweep_table(results.sweep, results.selected, "full_seq_acc", Legend(results.question.methods))
    return [f"{level} Learning-rate sweep (validation {measure})", "", *table, ""]
