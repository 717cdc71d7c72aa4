"""One table across comparisons: does a configuration meet every bar at once (text, exactness, fitting)?

Reads the rows of finished comparisons, pools them per task (a method's rows come from the first folder
that has it; every pooled method of a task must share the training budget), and checks each candidate
configuration against a baseline, one column per task and bar:

- text: mean bits per byte within ``text_tolerance`` of the baseline at 1x (relative), and within
  ``long_tolerance`` at the longest length (default 0: no worse than the baseline there);
- exact: full-sequence accuracy >= 0.99 on every test split in every seed;
- exact at the longest length: full-sequence accuracy >= 0.99 at the longest length in every seed;
- fits: trained to fit, fitted in at least as many seeds as the baseline.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ..utils.rows import read_rows
from .fit import steps_to_fit
from .pool import pooled_rows
from .tables import discussion_lines, label, mean_std

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


def by_comparison(folders) -> dict[str, list[Path]]:
    """Comparison folders grouped by the task and step cap of their rows ("hierarchy, 1000 steps"), in order."""
    grouped: dict[str, list[Path]] = defaultdict(list)
    for folder in folders:
        rows = read_rows(Path(folder) / "results.jsonl")
        if not rows:
            raise ValueError(f"{Path(folder) / 'results.jsonl'} is missing or empty; expected the rows of a comparison")
        steps = (rows[0].get("config") or {}).get("steps")
        grouped[f"{rows[0]['task']}, {steps} steps"].append(Path(folder))
    return grouped


def check_names(candidates: list[str], baseline: str, bars: dict[str, list]) -> None:
    """A ValueError naming the flag, before any table is built, unless some bar has folders, ``candidates`` are
    distinct and not the baseline, and every name has rows in at least one folder (its registry: the methods the
    comparisons ran). A name with no rows anywhere was a row of "n/a" and exit 0."""
    if not any(bars.values()):
        raise ValueError(f"scorecard: no folders; expected comparison folders for at least one of {', '.join(bars)}")
    repeated = sorted({name for name in candidates if candidates.count(name) > 1})
    if repeated:
        raise ValueError(f"--candidates: {repeated} given more than once; expected each method once")
    if baseline in candidates:
        raise ValueError(f"--candidates: {baseline!r} is the --baseline; expected methods to check against it")
    known: dict[str, None] = {}
    for folders in bars.values():
        for folder in folders:
            rows = read_rows(Path(folder) / "results.jsonl")
            if not rows:
                raise ValueError(
                    f"{Path(folder) / 'results.jsonl'} is missing or empty; expected the rows of a comparison"
                )
            known.update(dict.fromkeys(r["method"] for r in rows))
    for flag, names in (("--baseline", [baseline]), ("--candidates", candidates)):
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ValueError(
                f"{flag}: {unknown} {'has' if len(unknown) == 1 else 'have'} no rows in any folder given; expected "
                f"methods of those comparisons: {sorted(known)}"
            )


def scorecard(
    candidates: list[str],
    baseline: str,
    text=(),
    exact=(),
    exact_longest=(),
    fits=(),
    text_tolerance: float = 0.005,
    long_tolerance: float = 0.0,
) -> tuple[list[str], list[dict], dict[str, dict[str, Path]]]:
    """(column names, one dict per method: cells, bars passed and ``met`` (every bar met; None for the
    baseline), and per column the folder each method's rows came from).

    Each bar takes comparison folders, grouped by task and step cap (one column each): ``text`` (bits per byte near
    the baseline's), ``exact`` (every test split exact in every seed), ``exact_longest`` (exact at the
    longest length in every seed), ``fits`` (fitted in at least as many seeds as the baseline).
    """
    check_names(
        candidates, baseline, {"--text": text, "--exact": exact, "--exact-longest": exact_longest, "--fits": fits}
    )
    methods = [baseline, *candidates]
    columns, checks = [], []  # checks[i](method) -> (cell, passed; None: no rows)
    sources: dict[str, dict[str, Path]] = {}

    def text_check(rows):
        def check(method):
            gaps = text_gaps(rows, method, baseline)
            if not gaps:
                return "n/a", None
            short, long = gaps[min(gaps)], gaps[max(gaps)]
            return f"{100 * short:+.2f}% / {100 * long:+.2f}%", short <= text_tolerance and long <= long_tolerance

        return check

    def exact_check(rows, length=None):
        def check(method):
            worst = worst_by_seed(rows, method, length)
            if not worst:
                return "n/a", None
            exact = sum(value >= EXACT for value in worst.values())
            return f"{min(worst.values()):.3f} ({exact}/{len(worst)} seeds exact)", exact == len(worst)

        return check

    def fit_check(rows):
        def check(method):
            mine, theirs = fitted(rows, method), fitted(rows, baseline)
            if mine is None:
                return "n/a", None
            return f"{mine[0]}/{mine[1]}", theirs is not None and mine[0] >= theirs[0]

        return check

    for bar, folders in (("text", text), ("exact", exact), ("longest", exact_longest), ("fits", fits)):
        for task, group in by_comparison(folders).items():
            rows, found = pooled_rows(group, methods)
            if bar == "text":
                column, check = f"{task}: bits per byte vs {label(baseline)}, 1x / longest", text_check(rows)
            elif bar == "exact":
                column, check = f"{task}: worst split, worst seed", exact_check(rows)
            elif bar == "longest":
                longest = max(r["length"] for r in rows if r["metric"] == "full_seq_acc")
                column, check = f"{task} at {longest}: worst seed", exact_check(rows, longest)
            else:
                column, check = f"{task}: seeds fitted", fit_check(rows)
            columns.append(column)
            checks.append(check)
            sources[column] = found
    table = []
    for method in methods:
        cells = [check(method) for check in checks]
        met = None if method == baseline else all(passed for _, passed in cells)
        table.append({"method": method, "cells": [c for c, _ in cells], "passed": [p for _, p in cells], "met": met})
    return columns, table, sources


def scorecard_markdown(columns: list[str], table: list[dict]) -> list[str]:
    """The scorecard as a Markdown table: a cell that misses its bar is marked ✗, the baseline row is plain."""
    lines = ["| method | " + " | ".join(columns) + " | every bar |", "|---" * (len(columns) + 2) + "|"]
    for entry in table:
        cells = [
            cell if passed is None or entry["met"] is None else f"{cell} {'✓' if passed else '✗'}"
            for cell, passed in zip(entry["cells"], entry["passed"])
        ]
        verdict = "(baseline)" if entry["met"] is None else ("**yes**" if entry["met"] else "no")
        lines.append(f"| {label(entry['method'])} | " + " | ".join(cells) + f" | {verdict} |")
    return lines


def scorecard_page(columns, table, sources, command: str, notes: str = "") -> str:
    """The Markdown page: the command, the table, where every method's rows came from, the discussion."""
    lines = ["# One configuration against every bar", "", f"Command: `{command}`  ", ""]
    lines += [__doc__.split("\n\n", 1)[1].strip(), ""]
    lines += scorecard_markdown(columns, table)
    lines += ["", "## Sources", "", "| column | method | rows from |", "|---|---|---|"]
    for comparison, methods in sources.items():
        for method in [e["method"] for e in table]:
            if method in methods:
                lines.append(f"| {comparison} | {label(method)} | `{methods[method]}` |")
    if notes:
        lines += ["", *discussion_lines(notes)]
    return "\n".join(lines) + "\n"
