"""Split-KV (Flash-Decoding style) TRA for a few queries against a long key cache.

The keys are cut into splits that are attended independently (in parallel on a GPU), each with
contextual counts local to its split. A key in split s is preceded, on its right, by the kept keys
of every later split, so its true count is its local count plus that number n_right(s); in the
logits that is a constant shift g * n_right(s) per split and row. Merging the splits' (lse, out)
pairs with those shifts reproduces exact TRA (derivation: docs/split_kv.md).

The windows of the keep rule need no kernel support here: a sliding window drops the keys outside it
before splitting, and the local window's keys (all kept, whatever their score) form one more split,
computed with threshold -inf, to the right of the others (docs/windows.md, section 4). Segment ids
(a packed or padded cache) travel with the keys into every split, with the query's own document id, so
each split keeps only keys of that document and skips the key blocks left of its start (docs/varlen.md).
"""

from __future__ import annotations

import math
from functools import partial

import torch

from ..masks import compute_dtype
from .contract import NO_AIDS, NO_DOCUMENTS, Documents, KeepRule, TrainingAids
from .segments import Segments


def combine_splits(outs: torch.Tensor, lses: torch.Tensor, counts: torch.Tensor, log_gate: torch.Tensor):
    """Merge per-split results, splits along dim 0 in key order (left to right).

    outs (P, ..., D), lses (P, ...) with +inf for splits without a kept key, counts (P, ...) of kept
    keys, log_gate (...). Returns the output (..., D) in fp32 (fp64 for fp64 inputs).
    """
    cdt = compute_dtype(outs.dtype)
    n_right = counts.flip(0).cumsum(0).flip(0) - counts  # kept keys in the splits to the right
    shifted = torch.where(torch.isinf(lses), -math.inf, lses.to(cdt) + log_gate.to(cdt) * n_right.to(cdt))
    total = torch.logsumexp(shifted, dim=0)
    weights = torch.where(torch.isinf(total), 0.0, torch.exp(shifted - total))
    return (weights[..., None] * outs.to(cdt)).sum(0)


def split_kv_attention(
    q,
    k,
    v,
    log_gate,
    *,
    scale: float,
    keep: KeepRule,
    documents: Documents = NO_DOCUMENTS,
    aids: TrainingAids = NO_AIDS,
    n_splits: int,
    forward_stats,
):
    """TRA for q (B,H,Sq,D) whose queries all come after the keys, e.g. decoding (Sq = 1).

    ``forward_stats(q, k, v, log_gate, scale=..., keep=..., segments=...)`` returns (out, lse, count, ...) for
    one split (``chunked.chunked_forward_stats``, ``triton_op.forward_stats``); every split is run as an extra
    batch entry of a single call. ``keep`` is the op's keep rule, ``documents`` its documents. No training aid is
    served (decoding: no dropout, no gradient to relax): any is refused.
    """
    aids.refuse("split_kv_attention", "keep_surrogate", "logit_dropout", "dropout_seed", reason="decoding only")
    sq = q.shape[2]
    if sq != 1:
        raise ValueError(f"split_kv_attention: Sq = {sq}; expected a single query per sequence")
    segments = documents.segments(sq)
    if keep.sliding_window:  # keys at distance >= sliding_window are never kept and count nothing
        cut = max(0, k.shape[2] - keep.sliding_window)
        k, v = k[:, :, cut:], v[:, :, cut:]
        segments = None if segments is None else segments.split(cut, 1, k.shape[2])
    n_local = min(keep.local_window, k.shape[2])
    far = k.shape[2] - n_local
    # Inside each split only the threshold decides (the windows are handled here, around the splits).
    thresholded = KeepRule(threshold=keep.threshold)
    stats = partial(forward_stats, scale=scale)
    parts = _split_stats(q, k[:, :, :far], v[:, :, :far], log_gate, thresholded, n_splits, stats, segments)
    if n_local:  # the local keys are all kept: threshold -inf gives them their exact in-split counts
        local_segments = None if segments is None else segments.split(far, 1, n_local)
        everything = KeepRule(threshold=float("-inf"))
        local = stats(q, k[:, :, far:], v[:, :, far:], log_gate, keep=everything, segments=local_segments)[:3]
        parts.append(tuple(t[:, None] for t in local))
    outs = torch.cat([p[0] for p in parts], dim=1).movedim(1, 0)
    lses = torch.cat([p[1] for p in parts], dim=1).movedim(1, 0)
    counts = torch.cat([p[2] for p in parts], dim=1).movedim(1, 0)
    return combine_splits(outs, lses, counts, log_gate).to(q.dtype)


def _split_stats(q, k, v, log_gate, keep: KeepRule, n_splits: int, forward_stats, segments: Segments | None) -> list:
    """(out, lse, count) of up to ``n_splits`` key splits, each (B, splits, H, 1, ...), left to right."""
    b, h, _, d = q.shape
    sk = k.shape[2]
    if sk == 0:
        return []
    chunk = math.ceil(sk / n_splits)
    n_full, rest = divmod(sk, chunk)
    pieces = [(0, n_full, chunk)] if n_full else []  # (first key, splits, keys per split)
    if rest:
        pieces.append((n_full * chunk, 1, rest))
    parts = []
    for start, n, size in pieces:
        keys = slice(start, start + n * size)
        ks = k[:, :, keys].reshape(b, h, n, size, d).transpose(1, 2).reshape(b * n, h, size, d)
        vs = v[:, :, keys].reshape(b, h, n, size, d).transpose(1, 2).reshape(b * n, h, size, d)
        qs = q[:, None].expand(b, n, h, 1, d).reshape(b * n, h, 1, d)
        gs = log_gate[:, None].expand(b, n, h, 1).reshape(b * n, h, 1)
        split_segments = None if segments is None else segments.split(start, n, size)
        out, lse, count = forward_stats(qs, ks, vs, gs, keep=keep, segments=split_segments)[:3]
        parts.append((out.reshape(b, n, h, 1, d), lse.reshape(b, n, h, 1), count.reshape(b, n, h, 1)))
    return parts
