"""Whether a method fitted its training task, and after how many steps: shared by the synthetic-task pages.

A method whose validation (held-out, training distribution) full-sequence accuracy stays below
FIT_ACCURACY in some seed did not fit; its out-of-distribution numbers say nothing about generalisation.
"""

from __future__ import annotations

from collections import defaultdict

FIT_ACCURACY = 0.99  # validation full-sequence accuracy a run must reach to count as fitted


def unfit_methods(rows: list[dict]) -> set[str]:
    """Methods with a seed whose final validation full-sequence accuracy is below FIT_ACCURACY."""
    return {
        r["method"]
        for r in rows
        if r["split"] == "validation" and r["metric"] == "full_seq_acc" and not r["value"] >= FIT_ACCURACY
    }


def steps_to_fit(rows: list[dict]) -> dict[str, list[int | None]]:
    """Per method, each seed's steps to fit in seed order (None: it never fitted); only runs trained to fit
    (whose rows carry ``steps``) appear."""
    trained = {(r["method"], r["seed"]) for r in rows if r["split"] == "validation" and r["metric"] == "steps"}
    fitted = {
        (r["method"], r["seed"]): int(r["value"])
        for r in rows
        if r["split"] == "validation" and r["metric"] == "steps_to_fit"
    }
    found = defaultdict(list)
    for method, seed in sorted(trained, key=lambda ms: (ms[0], ms[1])):
        found[method].append(fitted.get((method, seed)))
    return dict(found)


def steps_to_fit_cell(values: list[int | None]) -> str:
    """'300, 450, never': each seed's steps to fit."""
    return ", ".join("never" if v is None else str(v) for v in values) if values else "n/a"
