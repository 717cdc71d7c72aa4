"""Causal masks, document masks and positions, and masked softmaxes shared by every attention op.

Queries sit at the last Sq of Sk positions (prefill: Sq = Sk; decoding: Sq < Sk), so the causal mask is
aligned bottom-right. The softmaxes run over a boolean ``keep`` mask (causal, and for TRA thresholded) and
give rows with no kept entry all-zero weights. Packed or padded batches describe their documents with
segment ids (ops/varlen.py; -1 on padding): ``document_mask`` narrows the causal mask to a query's own
document and ``document_positions`` numbers the tokens of each document from 0 (docs/padding_and_packing.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .varlen import segment_mask


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype: fp64 for fp64 inputs, fp32 for everything else."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def query_positions(sq: int, sk: int, device=None) -> torch.Tensor:
    """Absolute positions Sk - Sq, ..., Sk - 1 of the Sq queries."""
    return torch.arange(sk - sq, sk, device=device)


def causal_mask(sq: int, sk: int, device=None) -> torch.Tensor:
    """Boolean (Sq, Sk) mask, True where key j is visible to query r (j <= Sk - Sq + r).

    Unlike SDPA's ``is_causal``, which aligns the mask top-left, this aligns it bottom-right, as a
    KV cache needs.
    """
    return torch.arange(sk, device=device)[None, :] <= query_positions(sq, sk, device)[:, None]


def relative_distance(sq: int, sk: int, device=None) -> torch.Tensor:
    """(Sq, Sk) integer distance i - j between query position i and key position j."""
    return query_positions(sq, sk, device)[:, None] - torch.arange(sk, device=device)[None, :]


def document_mask(segment_ids: torch.Tensor, sq: int) -> torch.Tensor:
    """(B, 1, Sq, Sk) bool: key j is visible to query r iff it is causal and in the query's document.

    A padding query (segment id < 0) sees its own key only, so no softmax row is empty: an empty row is NaN
    in a plain softmax (and in some SDPA backends), and its NaN would reach every row through the next
    layer's keys (NaN times a zero weight). Real queries never see padding, so what padding rows compute
    changes no real output.
    """
    sk = segment_ids.shape[-1]
    distance = relative_distance(sq, sk, segment_ids.device)
    own_if_padding = (segment_ids[:, None, sk - sq :, None] < 0) & (distance == 0)
    return (segment_mask(segment_ids, sq) & (distance >= 0)) | own_if_padding


def document_positions(segment_ids: torch.Tensor) -> torch.Tensor:
    """(B, S) int64 position of each token in its document, counting only the document's real tokens (0, 1, ...;
    0 on padding). Documents are contiguous runs of a segment id (ops/varlen.py), so padding before a document,
    or between two of its tokens, shifts nothing."""
    real = segment_ids >= 0
    before = real.cumsum(-1) - 1  # real tokens of the row before this one
    latest = torch.where(real, segment_ids, -1).cummax(-1).values  # the row's latest document id so far
    previous = F.pad(latest[..., :-1], (1, 0), value=-1)
    starts = real & (segment_ids != previous)  # the first real token of each document
    first = torch.where(starts, before, 0).cummax(-1).values  # ``before`` at the current document's start
    return torch.where(real, before - first, 0)


def masked_softmax(logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Softmax over kept entries; rows with no kept entry get all-zero weights (and zero gradient)."""
    has_key = keep.any(-1, keepdim=True)
    masked = torch.where(keep, logits, float("-inf"))
    # Rows with no kept key would softmax to NaN: give them finite logits, then zero their weights.
    return torch.softmax(torch.where(has_key, masked, 0.0), dim=-1) * keep


def dropped_softmax(logits: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    """Softmax weights over the kept entries of ``logits`` after dropout p on the logits (ops/logit_dropout.py).

    Entries outside ``keep`` are set to 0 first (a -inf bias times a dropout mask of 0 would be NaN);
    rows with no kept entry get zero weights, as in TRA.
    """
    logits = F.dropout(torch.where(keep, logits, 0.0), p, training=True)
    return masked_softmax(logits, keep)
