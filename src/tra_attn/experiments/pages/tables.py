"""Helpers shared by every page: the legend (methods in the question's order, their colours), mean ± std over
seeds, the cells of diverged runs, the page header, the methods table, the sweep table and the discussion."""

from __future__ import annotations

import math
import statistics as stats
from collections import defaultdict

from ...models import ModelConfig
from ..methods import PALETTE, label_value
from ..parameters import parameter_count
from ..selection import MAX_EXTENSIONS
from ..store import DIVERGED


class Legend:
    """How a page shows its methods: in the question's order, by label (rows name methods by their label), each
    with its colour."""

    def __init__(self, methods):
        self.methods = {m.label: m for m in methods}
        uncoloured = [label for label, m in self.methods.items() if not m.color]
        self.colors = {label: m.color for label, m in self.methods.items() if m.color}
        self.colors |= {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(uncoloured)}

    def order(self, labels) -> list[str]:
        """``labels`` in the question's order (any other name after, alphabetically)."""
        labels = set(labels)
        return [m for m in self.methods if m in labels] + sorted(labels - set(self.methods))

    def color(self, label: str) -> str | None:
        """The method's colour: its own, its kind's, or the next palette colour on this page."""
        return self.colors.get(label)


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


def page_header(title: str, command: str, commits, preset: str, status: str) -> list[str]:
    """Title, the command that trains what is missing and writes the page, the commits and the preset."""
    lines = [f"# {title}", "", f"Command: `{command}` (trains the runs the store lacks, then writes this page)  "]
    lines += [f"Code: commit {', '.join(sorted(set(commits)))}  "]
    if preset:
        lines += [f"Preset: {preset}  "]
    return lines + [f"Status: {status}", ""]


def rate_cell(grid: tuple[float, ...], selected: float | None, sweep_seeds, given: tuple[float, ...] = ()) -> str:
    """How a method's learning rate was chosen: '0.001 (chosen from 0.001, 0.003 on seed 0)', given, or the
    preset's; the rates of ``grid`` beyond the ``given`` one are named as added (an extended grid), and a choice at
    an edge of the grid as such."""
    if selected is None:
        return "n/a"
    if len(grid) > 1:
        seeds = f"seed{'s' * (len(sweep_seeds) > 1)} {', '.join(map(str, sweep_seeds))}"
        added = [lr for lr in grid if given and lr not in given]
        notes = [f"added {', '.join(f'{lr:g}' for lr in added)}"] if added else []
        notes += ["at an edge"] if selected in (min(grid), max(grid)) else []
        extra = f"; {'; '.join(notes)}" if notes else ""
        return f"{selected:g} (chosen from {', '.join(f'{lr:g}' for lr in grid)} on {seeds}{extra})"
    return f"{selected:g} (given)" if grid else f"{selected:g} (the preset's)"


def methods_section(results, level: str) -> list[str]:
    """The methods of a task's results (``engine.Results``): label, kind, what each changes from the preset, its
    model's parameters, and its learning rate with how it was chosen (and where given or preset rates come
    from)."""
    question, sweep_seeds = results.question, results.question.sweeping()
    configs = {r["method"]: r["config"] for r in results.rows}
    lines = [f"{level} Methods", "", "| method | kind | changes | parameters | learning rate |", "|---" * 5 + "|"]
    reference = question.match_parameters
    for m in results.methods:
        given = question.grid(m) if question.extend_grid else ()
        rate = rate_cell(results.grids.get(m.label, ()), results.selected.get(m.label), sweep_seeds, given)
        count = f"{parameter_count(configs[m.label]):,}"
        if reference is not None:
            count += f" (MLP {ModelConfig.from_dict(configs[m.label]['model']).mlp_width})"
        lines.append(f"| {m.label} | `{m.kind}` | {m.changes()} | {count} | {rate} |")
    lines += ["", "Parameters: the whole model's, embeddings included, as the method's config builds it."]
    if reference is not None:
        lines[-1] += (
            f" Matched: every method's MLP width (in brackets) brings it within 2% of {reference.label}'s count, "
            "unless the method sets its own."
        )
    grids = [results.grids.get(m.label, ()) for m in results.methods]
    if any(len(g) > 1 for g in grids):
        cap = results.experiment.fit_accuracy
        tie = f" (every value of {cap} and above counts as equal: the run fitted)" if cap is not None else ""
        lines += ["", f"Chosen: the rate with the best mean validation value over the sweep seeds{tie}; ties go to "
                  "the smaller rate."]  # fmt: skip
        if question.extend_grid:
            fitted = " and did not fit" if cap is not None else ""
            lines[-1] += (
                f" Extended grids: where the chosen rate sat at an edge of its grid{fitted}, the next rate beyond that "
                f"edge (1e-3, 3e-3, 1e-2, ...) was swept too, until the choice fell inside the grid, at most "
                f"{MAX_EXTENSIONS} rates a side."
            )
    if any(not g for g in grids):
        lines += ["", f"The preset's rates: {results.preset.rate_source()}."]
    if any(len(g) == 1 for g in grids):
        lines += ["", f"Given rates: {question.lrs_source}."]
    return [*lines, ""]


def sweep_table(sweep: list[dict], selected: dict[str, float], metric: str, legend: Legend) -> list[str]:
    """Validation ``metric`` per method and learning rate (mean ± std over seeds, or "diverged"), and the
    selected rate."""
    by_lr = defaultdict(dict)
    for r in sweep:
        if r["split"] == "validation" and r["metric"] == metric:
            by_lr[r["method"]].setdefault(r["lr"], []).append(r["value"])
    lrs = sorted({r["lr"] for r in sweep})
    diverged = diverged_cells(sweep)
    lines = ["| method | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | selected |", "|" + "---|" * (len(lrs) + 2)]
    for method in legend.order(by_lr):
        cells = [diverged.get((method, lr)) or fmt(by_lr[method].get(lr, [])) for lr in lrs]
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {label_value(selected[method])} |")
    return lines


DISCUSSION = "## Discussion"


def discussion_lines(notes: str) -> list[str]:
    """A page's closing "Discussion" section holding the text of a notes file; notes that open with that
    heading themselves get it once, not twice."""
    text = notes.strip()
    if text.splitlines()[:1] == [DISCUSSION]:
        text = text[len(DISCUSSION) :].strip()
    return [DISCUSSION, "", text]
