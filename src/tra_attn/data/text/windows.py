"""Training and evaluation windows over a token array, as pure functions of their arguments.

A window of ``length`` is ``length + 1`` consecutive tokens: the model reads the first ``length`` and
predicts the last ``length`` (inputs and labels shifted by one). Training samples window starts at
random, reproducibly from (seed, step); evaluation tiles the text so that every token after the first
is scored exactly once, with non-overlapping or sliding windows.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np
import torch


class EvalWindow(NamedTuple):
    """One evaluation window: tokens ``[start, end)``; the labels ``tokens[first_scored:end]`` count.

    The model reads ``tokens[start:end-1]`` and predicts ``tokens[start+1:end]``; the earlier predictions
    are context only (already scored by the previous window).
    """

    start: int
    end: int
    first_scored: int

    @property
    def label_offset(self) -> int:
        """Index, among this window's ``end - start - 1`` labels, of the first scored one."""
        return self.first_scored - self.start - 1

    @property
    def num_scored(self) -> int:
        """How many of this window's labels are scored."""
        return self.end - self.first_scored


def _check_int(function: str, name: str, value, minimum: int) -> int:
    """``value`` as an int if it is an integer >= ``minimum``, else a ValueError naming ``function`` and ``name``."""
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{function}: {name} = {value!r}; expected an integer >= {minimum}")
    return int(value)


def _check_fits(function: str, n_tokens: int, length: int) -> None:
    """A ValueError unless one window (``length + 1`` tokens) fits in the text."""
    if n_tokens < length + 1:
        raise ValueError(
            f"{function}: length = {length} needs at least {length + 1} tokens (a window is length + 1 tokens: "
            f"length inputs and their next-token labels); the text has n_tokens = {n_tokens}"
        )


def train_window_starts(
    n_tokens: int, length: int, batch_size: int, seed: int, step: int, rank: int = 0, world_size: int = 1
) -> np.ndarray:
    """Start offsets (int64) of this rank's training windows at ``step``: uniform in [0, n_tokens - length - 1].

    ``batch_size`` is the global batch; rank ``r`` of ``world_size`` gets windows
    ``[r * batch_size // world_size, (r + 1) * batch_size // world_size)`` of it, so ranks are disjoint
    and together form exactly the single-process batch. Start ``i`` is a hash of (seed, step, i): the same
    on every machine and numpy version, and independent of how the batch is split.
    """
    fn = "train_window_starts"
    n_tokens = _check_int(fn, "n_tokens", n_tokens, 2)
    length = _check_int(fn, "length", length, 1)
    batch_size = _check_int(fn, "batch_size", batch_size, 1)
    seed = _check_int(fn, "seed", seed, 0)
    step = _check_int(fn, "step", step, 0)
    world_size = _check_int(fn, "world_size", world_size, 1)
    rank = _check_int(fn, "rank", rank, 0)
    _check_fits(fn, n_tokens, length)
    if rank >= world_size:
        raise ValueError(f"{fn}: rank = {rank}; expected 0 <= rank < world_size = {world_size}")
    if batch_size % world_size:
        raise ValueError(f"{fn}: batch_size = {batch_size}; expected a multiple of world_size = {world_size}")
    per_rank = batch_size // world_size
    index = np.arange(rank * per_rank, (rank + 1) * per_rank, dtype=np.uint64)
    base = int.from_bytes(hashlib.sha256(f"tra-windows:{seed}:{step}".encode()).digest()[:8], "little")
    # splitmix64 of base + golden * i; the modulo bias is below range / 2**64 (negligible)
    x = np.uint64(base) + index * np.uint64(0x9E3779B97F4A7C15)  # uint64 arithmetic wraps, as splitmix64 needs
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(n_tokens - length)).astype(np.int64)


def eval_windows(n_tokens: int, length: int, stride: int | None = None) -> list[EvalWindow]:
    """Windows that score every token after the first exactly once, in order.

    ``stride=None`` (or ``length``): non-overlapping windows; window ``k`` starts at ``k * length`` and
    scores all its labels. ``stride < length``: sliding windows starting every ``stride`` tokens; the first
    scores all its labels, each later one only the labels past the previous window's end (its last
    ``stride``), so every scored token but the first window's has at least ``length - stride`` tokens of
    context. The last window may be shorter (it ends at the text's end).
    """
    fn = "eval_windows"
    n_tokens = _check_int(fn, "n_tokens", n_tokens, 2)
    length = _check_int(fn, "length", length, 1)
    if stride is None:
        stride = length
    if not isinstance(stride, int | np.integer) or isinstance(stride, bool) or not 0 < stride <= length:
        raise ValueError(f"{fn}: stride = {stride!r}; expected None or an integer in [1, length = {length}]")
    stride = int(stride)
    _check_fits(fn, n_tokens, length)
    windows, scored_until, start = [], 1, 0  # tokens [1, scored_until) are scored so far
    while scored_until < n_tokens:
        end = min(start + length + 1, n_tokens)
        windows.append(EvalWindow(start, end, scored_until))
        scored_until, start = end, start + stride
    return windows


def _as_starts(function: str, starts, n_tokens: int, length: int) -> np.ndarray:
    """``starts`` as int64, or a ValueError naming the first start whose window leaves the text."""
    starts = np.asarray(starts.cpu() if isinstance(starts, torch.Tensor) else starts)
    if starts.ndim != 1 or (starts.size and starts.dtype.kind not in "iu"):
        raise ValueError(f"{function}: starts of shape {starts.shape} and dtype {starts.dtype}; expected 1-d integers")
    bad = np.flatnonzero((starts < 0) | (starts > n_tokens - length - 1))
    if bad.size:
        raise ValueError(
            f"{function}: starts[{bad[0]}] = {starts[bad[0]]}; expected 0 <= start <= n_tokens - length - 1 "
            f"= {n_tokens - length - 1} (n_tokens = {n_tokens}, length = {length})"
        )
    return starts.astype(np.int64)


def batch_from_windows(tokens: np.ndarray, starts, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels), int64 tensors of shape (len(starts), length): ``tokens[s:s+length]`` and the next ids."""
    length = _check_int("batch_from_windows", "length", length, 1)
    starts = _as_starts("batch_from_windows", starts, len(tokens), length)
    rows = np.asarray(tokens[starts[:, None] + np.arange(length + 1)], dtype=np.int64)
    rows = torch.from_numpy(rows)
    return rows[:, :-1], rows[:, 1:]


def window_segments(document_starts, starts, length: int) -> torch.Tensor:
    """(len(starts), length + 1) int64: the document of each token of the windows at ``starts``, numbered from 0
    in each row (the ids a packed batch gives the model: no token attends to another document).

    ``document_starts`` are the increasing offsets of the documents in the token array, the first 0.
    """
    fn = "window_segments"
    length = _check_int(fn, "length", length, 1)
    bounds = np.asarray(document_starts)
    if bounds.ndim != 1 or not bounds.size or bounds.dtype.kind not in "iu" or bounds[0] != 0:
        raise ValueError(f"{fn}: document_starts = {bounds[:4]}...; expected 1-d integer offsets starting at 0")
    if np.any(np.diff(bounds) <= 0):
        bad = int(np.flatnonzero(np.diff(bounds) <= 0)[0])
        raise ValueError(f"{fn}: document_starts[{bad}:{bad + 2}] = {bounds[bad : bad + 2]}; expected increasing")
    starts = np.asarray(starts.cpu() if isinstance(starts, torch.Tensor) else starts, dtype=np.int64)
    documents = np.searchsorted(bounds, starts[:, None] + np.arange(length + 1), side="right") - 1
    return torch.from_numpy(documents - documents[:, :1])


def eval_batch(tokens: np.ndarray, window: EvalWindow) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(inputs, labels, loss_mask) of one evaluation window, each of shape (1, end - start - 1).

    ``loss_mask`` is True at the labels the window scores (``tokens[first_scored:end]``).
    """
    start, end, first = (int(v) for v in window)
    if not 0 <= start < first <= end <= len(tokens) or end - start < 2:
        raise ValueError(
            f"eval_batch: window = {tuple(window)}; expected (start, end, first_scored) from eval_windows "
            f"with 0 <= start < first_scored <= end <= len(tokens) = {len(tokens)}"
        )
    row = torch.from_numpy(np.asarray(tokens[start:end], dtype=np.int64))[None]
    mask = torch.zeros(1, end - start - 1, dtype=torch.bool)
    mask[:, first - start - 1 :] = True
    return row[:, :-1], row[:, 1:], mask
