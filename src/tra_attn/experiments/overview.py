"""An overview: one figure per method and question, read from other questions' rows (the README's results table).

Each column reads one question (its rows, as its own page has them) and shows one figure per method: the mean
over seeds of a metric at the question's longest test length, the seeds fitted, or bits per byte at the
training length or the longest; a † marks a method that did not fit in every seed, where the task trains to
fit. A row may be a Method (found in each question by what it trains) or a label (found by label).
"""

from __future__ import annotations

import statistics

from .fit import steps_to_fit, unfit_methods
from .scorecard import bar_rows
from .spec import Column, Overview, row_label


def metric_rows(rows: list[dict]) -> tuple[str, list[dict]]:
    """(the metric, the test rows a figure reads): bits per byte on non-overlapping windows for text, else
    full-sequence accuracy, with the passkey's depths averaged into one split."""
    if any(r["metric"] == "bits_per_byte" and r["split"] == "non_overlapping" for r in rows):
        return "bits_per_byte", [r for r in rows if r["split"] == "non_overlapping"]
    tests = [r for r in rows if r["split"] != "validation" and r["metric"] == "full_seq_acc"]
    if tests and all(r["split"].startswith("depth") for r in tests):
        by_cell: dict[tuple, list[float]] = {}
        for r in tests:
            by_cell.setdefault((r["method"], r["seed"], r["length"]), []).append(r["value"])
        common = {"split": "all depths", "metric": "full_seq_acc"}
        tests = [
            {**common, "method": m, "seed": s, "length": n, "value": statistics.fmean(v)}
            for (m, s, n), v in by_cell.items()
        ]
    return "full_seq_acc", tests


def cell(column: Column, rows: list[dict], label: str) -> str:
    """The column's figure for the method ``label`` (n/a without rows)."""
    mine = [r for r in rows if r["method"] == label]
    if not mine:
        return "n/a"
    if column.figure == "fitted":
        seeds = steps_to_fit(rows).get(label, [])
        return f"{sum(s is not None for s in seeds)}/{len(seeds)}" if seeds else "n/a"
    metric, tests = metric_rows(mine)
    lengths = sorted({r["length"] for r in tests})
    if not lengths:
        return "diverged"
    length = lengths[-1] if column.figure == "longest" else lengths[0]
    at = [r for r in tests if r["length"] == length]
    first_split = at[0]["split"]
    values = [r["value"] for r in at if r["split"] == first_split and r["metric"] == metric]
    unfit = " †" if metric == "full_seq_acc" and label in unfit_methods(rows) else ""
    return f"{statistics.fmean(values):.3f}{unfit}"


def overview_rows(overview: Overview, source, device: str = "cpu") -> tuple[list[list[str]], set[str]]:
    """Per row, its cells; and the commits of the rows read."""
    by_column, commits = [], set()
    for column in overview.columns:
        rows, sweep = bar_rows(overview.rows, column.bar, source, device)
        by_column.append(rows)
        commits |= {r["commit"] for r in rows + sweep}
    table = [[cell(c, rows, row_label(r)) for c, rows in zip(overview.columns, by_column)] for r in overview.rows]
    return table, commits


def overview_lines(overview: Overview, table: list[list[str]]) -> list[str]:
    """The table (its header links each column's question) and its legend."""
    header = " | ".join(f"[{c.title}](../{c.names[0]}/README.md)" for c in overview.columns)
    lines = [f"| method | {header} |", "|---" * (len(overview.columns) + 1) + "|"]
    lines += [f"| {row_label(r)} | " + " | ".join(cells) + " |" for r, cells in zip(overview.rows, table)]
    lines += ["", legend(overview)]
    return lines


def legend(overview: Overview) -> str:
    """What the columns show, each kind of figure once."""
    meaning = {
        "longest": "the mean over seeds at the question's longest test length (full-sequence accuracy; bits per "
        "byte for text)",
        "first": "the mean over seeds at the training length (bits per byte for text)",
        "fitted": "the seeds that fitted the task within the step cap, of those trained",
    }
    parts = []
    for figure, text in meaning.items():
        titles = [c.title for c in overview.columns if c.figure == figure]
        if titles:
            parts.append(f"{', '.join(titles)}: {text}")
    return (
        "; ".join(parts) + ". † the method did not fit the task in every seed (its accuracy off the training "
        "distribution is no evidence about generalisation); n/a: the question does not run the method."
    )
