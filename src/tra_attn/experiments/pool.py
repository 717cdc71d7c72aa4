"""Several comparisons of one task drawn as one: each method's rows, sweep and chosen learning rate, taken from the
first folder that has it, written to a folder that ``tra report`` turns into one page.

A comparison that adds methods to a finished one need not retrain the finished methods; pooling is fair only if
nothing but the attention differs, so every pooled method must share the training budget (``BUDGET_FIELDS`` and
the model size), the seeds, and the learning-rate sweep (the same rates, on the same seeds, or no sweep at all).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..utils.rows import read_rows
from .runs import write_selection
from .tables import recorded_run

# Training-budget fields every pooled method of one task must share (only the attention may differ).
BUDGET_FIELDS = ("task", "task_args", "length", "steps", "batch_size", "grad_accum", "warmup_steps", "weight_decay")
MODEL_FIELDS = ("d_model", "n_layers", "n_heads", "mlp_ratio", "block_style", "dropout")


def budget(row: dict) -> tuple:
    """The fields of a row's training config that a fair comparison holds fixed."""
    config = row.get("config") or {}
    model = config.get("model", {})
    fields = [config.get(f) for f in BUDGET_FIELDS] + [model.get(f) for f in MODEL_FIELDS]
    return tuple(json.dumps(value, sort_keys=True) for value in fields)


def pooled_rows(folders: list[Path], methods=None) -> tuple[list[dict], dict[str, Path]]:
    """Every row of each method (of ``methods``, default all) from the first folder holding that method, and
    where each method came from.

    A ValueError names the folder when one has no rows, and the two methods when budgets differ.
    """
    rows, source = [], {}
    for folder in folders:
        found = read_rows(Path(folder) / "results.jsonl")
        if not found:
            raise ValueError(f"{Path(folder) / 'results.jsonl'} is missing or empty; expected the rows of a comparison")
        for method in dict.fromkeys(r["method"] for r in found):
            if method not in source and (methods is None or method in methods):
                source[method] = Path(folder)
                rows += [r for r in found if r["method"] == method]
    budgets = {}
    for r in rows:
        budgets.setdefault(budget(r), (r["method"], source[r["method"]]))
    if len(budgets) > 1:
        (m1, f1), (m2, f2) = list(budgets.values())[:2]
        raise ValueError(
            f"{m1} ({f1}) and {m2} ({f2}) were trained with different budgets; expected one budget per task "
            f"(the same {', '.join(BUDGET_FIELDS)} and model size)"
        )
    return rows, source


def _one(what: str, per_method: dict[str, object], source: dict[str, Path]) -> None:
    """A ValueError naming two methods (and their folders) whose ``what`` differs, if any do."""
    seen: dict[str, str] = {}
    for method, value in per_method.items():
        seen.setdefault(json.dumps(value, sort_keys=True), method)
    if len(seen) > 1:
        (v1, m1), (v2, m2) = list(seen.items())[:2]
        raise ValueError(
            f"{m1} ({source[m1]}) has {what} {v1} but {m2} ({source[m2]}) has {v2}; expected the same {what} for "
            "every pooled method"
        )


def pool(
    folders: list[Path], out: Path, methods=None, seeds=None, lrs=None, command: str = ""
) -> tuple[list[str], int]:
    """Write the pooled rows of ``folders`` (each method from the first folder that has it; of ``methods``, in
    their order, and ``seeds`` if given) to ``out``: results.jsonl, the sweep and selected_lrs.json, and run.json
    whose command runs every source's command and then ``command``. Returns the pooled methods and the number of
    rows.

    ``lrs`` keeps the sweep's rows at these rates only: methods swept over a wider grid pool with methods swept over
    these rates, provided each method's chosen rate is one of them (the best of a grid is then also the best of
    the part of it kept, so every method's rate is chosen among the same rates)."""
    out = Path(out)
    if out.resolve() in {Path(f).resolve() for f in folders}:
        raise ValueError(f"--out {out} is one of the pooled folders; expected a new folder")
    rows, source = pooled_rows(folders, methods)
    if methods is not None:
        if missing := [m for m in methods if m not in source]:
            raise ValueError(f"--methods {' '.join(missing)}: in none of {', '.join(map(str, folders))}")
        source = {m: source[m] for m in methods}  # the rows list the methods in the order asked for
        rows.sort(key=lambda r: methods.index(r["method"]))
    if seeds is not None:
        rows = [r for r in rows if r["seed"] in seeds]
        if not rows:
            raise ValueError(f"--seeds {' '.join(map(str, seeds))}: no rows of these seeds in the pooled folders")
    _one("seeds", {m: sorted({r["seed"] for r in rows if r["method"] == m}) for m in source}, source)
    sweeps = {f: read_rows(f / "sweep.jsonl") for f in dict.fromkeys(source.values())}
    swept = any(sweeps.values())
    if swept:
        chosen = {f: json.loads((f / "selected_lrs.json").read_text()) for f in sweeps if sweeps[f]}
        selected = {m: chosen.get(f, {}).get(m) for m, f in source.items()}  # None: its folder has no sweep
        if lrs is not None and (outside := {m: lr for m, lr in selected.items() if lr is not None and lr not in lrs}):
            raise ValueError(
                f"--lrs {' '.join(map(str, lrs))}: {', '.join(f'{m} chose {lr}' for m, lr in outside.items())} "
                "(each on its own sweep); expected every chosen rate among the kept ones"
            )
    else:
        selected = {r["method"]: r["lr"] for r in rows}
    sweep_rows = [
        r for m, f in source.items() for r in sweeps[f] if r["method"] == m and (lrs is None or r["lr"] in lrs)
    ]
    grid = {m: sorted({(r["lr"], r["seed"]) for r in sweep_rows if r["method"] == m}) for m in source}
    _one("learning-rate sweep (rate, seed)", grid, source)
    runs = [recorded_run(f) for f in sweeps]
    commands = list(dict.fromkeys(run["command"] for run in runs if run.get("command")))
    chosen_by = " ".join(dict.fromkeys(run["learning_rates"] for run in runs if run.get("learning_rates")))
    out.mkdir(parents=True, exist_ok=True)
    if not swept:  # a sweep of an earlier pool into the same folder must not outlive it
        for stale in ("sweep.jsonl", "sweep.configs.json", "selected_lrs.json"):
            (out / stale).unlink(missing_ok=True)
    write_selection(
        out,
        rows,
        selected,
        swept,
        "; ".join(commands + ([command] if command else [])),
        next((run["preset"] for run in runs if run.get("preset")), ""),
        sweep_rows=sweep_rows,
        learning_rates=chosen_by,
    )
    return list(source), len(rows)
