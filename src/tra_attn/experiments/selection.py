"""Learning-rate selection on validation data, shared by every experiment."""

from __future__ import annotations

import math
from collections import defaultdict


def select_lrs(rows: list[dict], metric: str, higher_is_better: bool, cap: float | None = None) -> dict[str, float]:
    """Per method, the learning rate with the best mean ``metric`` over seeds on the 'validation' split.

    Values better than ``cap`` count as ``cap`` (a run trained to fit stops as soon as it fits, so the
    margin beyond the threshold is noise). Ties go to the smallest learning rate: where several do equally
    well, the gentlest is the least likely to diverge on a seed the sweep did not see. NaN (a diverged run)
    ranks last.
    """
    sign = 1.0 if higher_is_better else -1.0
    ceiling = math.inf if cap is None else sign * cap
    scores: dict[tuple[str, float], list[float]] = defaultdict(list)
    for r in rows:
        if r["split"] == "validation" and r["metric"] == metric:
            value = -math.inf if math.isnan(r["value"]) else min(sign * r["value"], ceiling)
            scores[(r["method"], r["lr"])].append(value)
    best: dict[str, tuple[float, float]] = {}
    for (method, lr), values in sorted(scores.items()):
        mean = sum(values) / len(values)
        if method not in best or mean > best[method][0]:
            best[method] = (mean, lr)
    return {method: lr for method, (_, lr) in best.items()}
