"""One table across questions: does a configuration meet every bar at once (text, exactness, fitting)?

Each bar reads another question's rows: a method of the scorecard is that question's method that trains the
same (or has the same label), with its protocol (task, preset, seeds, learning-rate grid); a question without
it shows n/a. Nothing is pooled or copied: the store supplies the runs. The bars, against a baseline:

- text: mean bits per byte within the bar's ``tolerance`` of the baseline at 1x (relative), and within its
  ``long_tolerance`` at the longest length (default 0: no worse than the baseline there);
- exact: full-sequence accuracy >= 0.99 on every test split in every seed;
- longest: full-sequence accuracy >= 0.99 at the longest length in every seed;
- fits: trained to fit, fitted in at least as many seeds as the baseline.
"""

from __future__ import annotations

import dataclasses

from .engine import gather
from .fit import steps_to_fit
from .methods import Method
from .pages.tables import mean_std
from .spec import Bar, Question, Scorecard, row_label

TEXT_METRIC = "bits_per_byte"
EXACT = 0.99  # full-sequence accuracy that counts as exact


def per_seed(rows: list[dict], method: str, metric: str, split: str | None = None, length=None) -> list[float]:
    """The values of ``metric`` for ``method`` (one per seed), on one split and length if given."""
    return [
        r["value"]
        for r in rows
        if r["method"] == method
        and r["metric"] == metric
        and (split is None or r["split"] == split)
        and (length is None or r["length"] == length)
    ]


def text_gaps(rows: list[dict], method: str, baseline: str) -> dict[int, float]:
    """Per evaluation length: relative gap (method / baseline - 1) of the mean bits per byte, non-overlapping."""
    lengths = sorted({r["length"] for r in rows if r["metric"] == TEXT_METRIC and r["split"] == "non_overlapping"})
    gaps = {}
    for length in lengths:
        mine = per_seed(rows, method, TEXT_METRIC, "non_overlapping", length)
        theirs = per_seed(rows, baseline, TEXT_METRIC, "non_overlapping", length)
        if mine and theirs:
            gaps[length] = mean_std(mine)[0] / mean_std(theirs)[0] - 1
    return gaps


def worst_by_seed(rows: list[dict], method: str, length=None) -> dict[int, float]:
    """Per seed, the lowest full-sequence accuracy over every test split (or one length)."""
    worst: dict[int, float] = {}
    for r in rows:
        if (
            r["method"] == method
            and r["metric"] == "full_seq_acc"
            and r["split"] != "validation"
            and (length is None or r["length"] == length)
        ):
            worst[r["seed"]] = min(worst.get(r["seed"], 1.0), r["value"])
    return worst


def fitted(rows: list[dict], method: str) -> tuple[int, int] | None:
    """(seeds fitted, seeds trained) of a method trained to fit; None without rows."""
    seeds = steps_to_fit(rows).get(method)
    return None if not seeds else (sum(s is not None for s in seeds), len(seeds))


def found_in(question: Question, row: Method | str) -> Method | None:
    """The question's method for a scorecard row: the one that trains the same (a Method), or has the label."""
    for method in question.methods:
        if (method.signature == row.signature) if isinstance(row, Method) else (method.label == row):
            return dataclasses.replace(method, label=row_label(row))
    return None


def bar_rows(wanted, bar: Bar, source, device: str = "cpu") -> tuple[list[dict], list[dict]]:
    """(rows, sweep rows) of the methods or labels ``wanted`` on the bar: each from the first of its questions that
    runs it."""
    rows, sweep, placed = [], [], set()
    for question in bar.questions:
        methods = []
        for row in wanted:
            method = found_in(question, row)
            if method is not None and method.label not in placed:
                methods.append(method)
                placed.add(method.label)
        if methods:
            results = gather(dataclasses.replace(question, methods=tuple(methods)), bar.task, source, device)
            rows, sweep = rows + results.rows, sweep + results.sweep
    return rows, sweep


def column(bar: Bar, rows: list[dict], baseline: str) -> tuple[str, object]:
    """(the column's title, its check: method -> (cell, passed; None without rows))."""
    name = bar.name
    if bar.kind == "text":

        def check(method):
            gaps = text_gaps(rows, method, baseline)
            if not gaps:
                return "n/a", None
            short, long = gaps[min(gaps)], gaps[max(gaps)]
            return f"{100 * short:+.2f}% / {100 * long:+.2f}%", short <= bar.tolerance and long <= bar.long_tolerance

        return f"{name}: bits per byte vs {baseline}, 1x / longest", check
    if bar.kind in ("exact", "longest"):
        longest = max((r["length"] for r in rows if r["metric"] == "full_seq_acc"), default=None)
        length = longest if bar.kind == "longest" else None

        def check(method):
            worst = worst_by_seed(rows, method, length)
            if not worst:
                return "n/a", None
            exact = sum(value >= EXACT for value in worst.values())
            return f"{min(worst.values()):.3f} ({exact}/{len(worst)} seeds exact)", exact == len(worst)

        title = f"{name} at {longest}: worst seed" if length else f"{name}: worst split, worst seed"
        return title, check

    def check(method):
        mine, theirs = fitted(rows, method), fitted(rows, baseline)
        if mine is None:
            return "n/a", None
        return f"{mine[0]}/{mine[1]}", theirs is not None and mine[0] >= theirs[0]

    return f"{name}: seeds fitted", check


def scorecard(card: Scorecard, source, device: str = "cpu") -> tuple[list[str], list[dict], set[str]]:
    """(column titles, one dict per method: cells, bars passed and ``met`` (every bar met; None for the
    baseline), the commits of the rows read)."""
    columns, checks, commits = [], [], set()
    baseline = row_label(card.baseline)
    for bar in card.bars:
        rows, sweep = bar_rows(card.rows, bar, source, device)
        commits |= {r["commit"] for r in rows + sweep}
        title, check = column(bar, rows, baseline)
        columns.append(title)
        checks.append(check)
    table = []
    for label in map(row_label, card.rows):
        cells = [check(label) for check in checks]
        met = None if label == baseline else all(passed for _, passed in cells)
        table.append({"method": label, "cells": [c for c, _ in cells], "passed": [p for _, p in cells], "met": met})
    return columns, table, commits


def scorecard_markdown(columns: list[str], table: list[dict]) -> list[str]:
    """The scorecard as a Markdown table: a cell that misses its bar is marked ✗, the baseline row is plain."""
    lines = ["| method | " + " | ".join(columns) + " | every bar |", "|---" * (len(columns) + 2) + "|"]
    for entry in table:
        cells = [
            cell if passed is None or entry["met"] is None else f"{cell} {'✓' if passed else '✗'}"
            for cell, passed in zip(entry["cells"], entry["passed"])
        ]
        verdict = "(baseline)" if entry["met"] is None else ("**yes**" if entry["met"] else "no")
        lines.append(f"| {entry['method']} | " + " | ".join(cells) + f" | {verdict} |")
    return lines


def bars_table(card: Scorecard, columns: list[str]) -> list[str]:
    """Which questions each column reads (each method from the first that runs it), and their seeds."""
    lines = ["| column | questions | seeds |", "|---|---|---|"]
    for title, bar in zip(columns, card.bars):
        links = ", ".join(f"[{name}](../{name}/README.md)" for name in bar.names)
        lines.append(f"| {title} | {links} | {', '.join(map(str, bar.questions[0].seeds))} |")
    return lines


def scorecard_lines(card: Scorecard, columns: list[str], table: list[dict]) -> list[str]:
    """The body of a scorecard's page: what the bars mean, the table, and the questions behind each column."""
    return [__doc__.split("\n\n", 1)[1].strip(), "", *scorecard_markdown(columns, table), "", "## Bars", "",
            *bars_table(card, columns), ""]  # fmt: skip
