"""Learning-rate selection on validation data, shared by every experiment."""

from __future__ import annotations

import math
from collections import defaultdict

# A grid extended beyond its edge steps along this ladder of rates: 1 and 3 times each power of ten.
LADDER = (1.0, 3.0)
MAX_EXTENSIONS = 3  # rates added beyond one edge of a grid, at most (a factor of about 30)


def mean_scores(rows: list[dict], metric: str, higher_is_better: bool, cap: float | None = None) -> dict:
    """Per (method, learning rate), the mean ``metric`` over seeds on the 'validation' split, signed so that higher
    is better and capped at ``cap`` (a run trained to fit stops as soon as it fits, so the margin beyond the
    threshold is noise); NaN (a diverged run) is -inf."""
    sign = 1.0 if higher_is_better else -1.0
    ceiling = math.inf if cap is None else sign * cap
    scores: dict[tuple[str, float], list[float]] = defaultdict(list)
    for r in rows:
        if r["split"] == "validation" and r["metric"] == metric:
            value = -math.inf if math.isnan(r["value"]) else min(sign * r["value"], ceiling)
            scores[(r["method"], r["lr"])].append(value)
    return {key: sum(values) / len(values) for key, values in sorted(scores.items())}


def select_lrs(rows: list[dict], metric: str, higher_is_better: bool, cap: float | None = None) -> dict[str, float]:
    """Per method, the learning rate with the best mean ``metric`` over seeds on the 'validation' split.

    Values better than ``cap`` count as ``cap`` (``mean_scores``). Ties go to the smallest learning rate: where
    several do equally well, the gentlest is the least likely to diverge on a seed the sweep did not see. NaN (a
    diverged run) ranks last.
    """
    best: dict[str, tuple[float, float]] = {}
    for (method, lr), mean in mean_scores(rows, metric, higher_is_better, cap).items():
        if method not in best or mean > best[method][0]:
            best[method] = (mean, lr)
    return {method: lr for method, (_, lr) in best.items()}


def beyond(rate: float, up: bool) -> float:
    """The next rate of the ladder (1e-3, 3e-3, 1e-2, ...) above ``rate`` (``up``) or below it, by a factor of at
    least 1.5: from a rate on the ladder, its neighbour."""
    exponent = math.floor(math.log10(rate)) - 1
    ladder = [m * 10.0**e for e in range(exponent, exponent + 4) for m in LADDER]
    margin = 1.0 + 1e-9  # a factor of 1.5 exactly counts, whatever the rounding
    if up:
        return float(f"{min(r for r in ladder if r * margin >= 1.5 * rate):.0e}")
    return float(f"{max(r for r in ladder if r <= margin * rate / 1.5):.0e}")


def extension(grid: tuple[float, ...], chosen: float, score: float, ceiling: float, added: tuple[int, int]):
    """The rate a swept grid adds next, or None: the chosen rate sits at an edge of the grid (one rate beyond it
    could do better), it scored below the ``ceiling`` (a fitted run: no rate does better), and fewer than
    MAX_EXTENSIONS rates were added on that side (``added``: below, above)."""
    if score >= ceiling or min(grid) < chosen < max(grid):
        return None
    up = chosen == max(grid)
    if added[up] >= MAX_EXTENSIONS:
        return None
    return beyond(chosen, up)
