"""Helpers shared by every experiment's report: method order, labels and colours from the registry,
mean ± std over seeds."""

from __future__ import annotations

import math
import statistics as stats

from ..layers import ATTENTION_KINDS


def ordered(methods) -> list[str]:
    """Registry order (TRA, its ablations, baselines), then unregistered names alphabetically."""
    known = [m for m in ATTENTION_KINDS if m in methods]
    return known + sorted(set(methods) - set(known))


def label(method: str) -> str:
    kind = ATTENTION_KINDS.get(method)
    return kind.label if kind else method


def color(method: str) -> str | None:
    kind = ATTENTION_KINDS.get(method)
    return kind.color if kind else None


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
