"""Helpers shared by every experiment's report: method order, labels and colours from the method table,
mean ± std over seeds, the cells of diverged runs, the page header, the learning-rate note and the sweep
table."""

from __future__ import annotations

import json
import math
import statistics as stats
from collections import defaultdict
from pathlib import Path

from ..utils.rows import read_rows
from .methods import METHODS, resolve_method
from .runs import DIVERGED


def _known(method: str):
    """The method ``method`` names, or None for a name that is no method (rows of a plug-in not loaded)."""
    try:
        return resolve_method(method)
    except ValueError:
        return None


def ordered(methods) -> list[str]:
    """The attention kinds in the method table's order (TRA, its ablations, baselines), then every other
    name (variants, plug-ins) alphabetically."""
    kinds = [m for m, row in METHODS.items() if not row.is_variant and m in methods]
    return kinds + sorted(set(methods) - set(kinds))


def label(method: str) -> str:
    """The method's label in tables and plots; a name that is no method shows as itself."""
    known = _known(method)
    return known.label if known else method


def color(method: str) -> str | None:
    """The method's plot colour; None (the plot's next colour) for a name that is no method."""
    known = _known(method)
    return known.color if known else None


def mean_std(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, math.nan
    return stats.fmean(values), (stats.stdev(values) if len(values) > 1 else 0.0)


def fmt(values: list[float], digits: int = 3) -> str:
    mean, std = mean_std(values)
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f}" if len(values) == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def diverged_cells(rows: list[dict]) -> dict[tuple[str, float], str]:
    """Per (method, learning rate) with a seed whose training diverged, the text tables show in place of
    its numbers: "diverged", or "diverged (k of n seeds)" when only some seeds did."""
    seeds, diverged = defaultdict(set), defaultdict(set)
    for r in rows:
        seeds[(r["method"], r["lr"])].add(r["seed"])
        if r["metric"] == DIVERGED:
            diverged[(r["method"], r["lr"])].add(r["seed"])
    return {
        key: DIVERGED if found == seeds[key] else f"{DIVERGED} ({len(found)} of {len(seeds[key])} seeds)"
        for key, found in diverged.items()
    }


NO_TEST_DATA = "None: every run diverged before its evaluation."  # a page's test-data table then


def collect(rows: list[dict], metric: str) -> dict[tuple[str, str, int], list[float]]:
    """The values of ``metric`` per (method, split, length), one per seed."""
    table = defaultdict(list)
    for r in rows:
        if r["metric"] == metric:
            table[(r["method"], r["split"], r["length"])].append(r["value"])
    return table


def read_results(out: Path, producer: str, upgrade=lambda rows: rows) -> tuple[list[dict], dict]:
    """(rows of out/results.jsonl, out/run.json or {}); ValueError naming ``producer`` if there are no rows."""
    rows = upgrade(read_rows(out / "results.jsonl"))
    if not rows:
        raise ValueError(f"{out / 'results.jsonl'} is missing or empty; run `{producer} --out {out}` first")
    return rows, recorded_run(out)


def recorded_run(out: Path) -> dict:
    """out/run.json (the command, the preset, and where the learning rates came from), or {}."""
    return json.loads((out / "run.json").read_text()) if (out / "run.json").is_file() else {}


def report_command(out: Path, notes, markdown: Path) -> str:
    """The `tra report` command that rebuilds this page."""
    command = f"tra report {out}"
    if notes:
        command += f" --notes {notes}"
    if markdown != out / "results.md":
        command += f" --markdown {markdown}"
    return command


def page_header(title: str, command: str, regenerate: str, rows: list[dict], preset: str) -> list[str]:
    """Title, the producing command, the regenerating command, the commits and the preset."""
    lines = [f"# {title}", ""]
    if command:
        lines += [f"Command: `{command}`  "]
    return lines + [
        f"Regenerate this page from the rows: `{regenerate}`  ",
        f"Code: commit {', '.join(sorted({r['commit'] for r in rows}))}  ",
        f"Preset: {preset}" if preset else "",
        "",
    ]


PRESET_LEARNING_RATES = "Learning rates: the preset's."  # the note of pages whose run.json does not say


def learning_rate_note(rows: list[dict], sweep: list[dict], selected: dict, agreed: str, without_sweep: str) -> str:
    """How the page's learning rates were chosen: ``agreed`` when every method's rate is the sweep's choice,
    a warning naming those that are not, or ``without_sweep`` when no sweep was run."""
    if not sweep:
        return without_sweep
    used = {r["method"]: r["lr"] for r in rows}
    mismatched = sorted(m for m in used if m in selected and selected[m] != used[m])
    if mismatched:
        return f"Warning: the learning rates of {mismatched} differ from the sweep's selection below."
    return agreed


def variant_lines(methods) -> list[str]:
    """A "Variants" section describing the named variants among ``methods`` (none: no lines)."""
    named = [m for m in ordered(methods) if (v := _known(m)) is not None and v.is_variant]
    if not named:
        return []
    lines = ["## Variants", "", "| method | kind | what changes | fields |", "|---|---|---|---|"]
    for name in named:
        v = resolve_method(name)
        fields = ", ".join(f"`{k}={json.dumps(x)}`" for k, x in v.fields().items())
        lines.append(f"| {name} | {label(v.attention)} | {v.description} | {fields} |")
    return [*lines, ""]


def sweep_table(sweep: list[dict], selected: dict[str, float], metric: str) -> list[str]:
    """Validation ``metric`` per method and learning rate (mean ± std over seeds, or "diverged"), and the
    selected rate."""
    by_lr = defaultdict(dict)
    for r in sweep:
        if r["split"] == "validation" and r["metric"] == metric:
            by_lr[r["method"]].setdefault(r["lr"], []).append(r["value"])
    lrs = sorted({r["lr"] for r in sweep})
    diverged = diverged_cells(sweep)
    lines = ["| method | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | selected |", "|" + "---|" * (len(lrs) + 2)]
    for method in ordered(by_lr):
        cells = [diverged.get((method, lr)) or fmt(by_lr[method].get(lr, [])) for lr in lrs]
        lines.append(f"| {label(method)} | " + " | ".join(cells) + f" | {selected[method]:g} |")
    return lines


DISCUSSION = "## Discussion"


def discussion_lines(notes: str) -> list[str]:
    """A page's closing "Discussion" section holding the text of a notes file; notes that open with that
    heading themselves get it once, not twice."""
    text = notes.strip()
    if text.splitlines()[:1] == [DISCUSSION]:
        text = text[len(DISCUSSION) :].strip()
    return [DISCUSSION, "", text]
