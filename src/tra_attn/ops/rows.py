"""Whole key rows in blocks of queries, and the number of keys each query sees.

Stick-breaking's reverse product and entmax's per-row threshold need a query's whole row of keys at once, and
rows never interact, so their O(S * block)-memory paths walk blocks of query rows, each against the keys up to
its last row (``row_blocks``, ``visible_keys``). Query r of Sq sits at key position Sk - Sq + r (a KV cache).
"""

from __future__ import annotations

import torch

from .masks import causal_mask, document_mask, document_positions, relative_distance


def default_row_block(sq: int) -> int:
    """Query rows per block: 64 (the chunked TRA's key-block width); a short query chunk is one block."""
    return sq if sq <= 64 else 64


def row_blocks(sq: int, block: int):
    """(r0, r1) query-row ranges of at most ``block`` rows covering [0, sq)."""
    for r0 in range(0, sq, block):
        yield r0, min(r0 + block, sq)


def visible_keys(sq: int, sk: int, segment_ids: torch.Tensor | None, device, strict: bool = False) -> torch.Tensor:
    """Bool (Sq, Sk), or (B, 1, Sq, Sk) with ``segment_ids`` (B, Sk): key j is visible to query r iff it is causal
    (j <= Sk - Sq + r; j < with ``strict``) and, with segment ids, a real key of the query's document
    (``masks.document_mask``: a padding query sees its own key only)."""
    visible = causal_mask(sq, sk, device) if segment_ids is None else document_mask(segment_ids, sq)
    if strict:
        visible = visible & (relative_distance(sq, sk, device) > 0)
    return visible


def block_keys(sq: int, sk: int, r0: int, r1: int, segment_ids: torch.Tensor | None, device, strict: bool = False):
    """The keys [0, kp) that query rows [r0, r1) can see, and their visibility (``visible_keys``)."""
    kp = sk - sq + r1
    seg = None if segment_ids is None else segment_ids[:, :kp]
    return kp, visible_keys(r1 - r0, kp, seg, device, strict)


def key_counts(sq: int, past: int, segment_ids: torch.Tensor | None, device) -> torch.Tensor:
    """(1, Sq) or (B, Sq) int64: the keys each of the last Sq queries sees, its own included (n = i + 1 for query
    i), counted within its document in a packed or padded batch (1 on padding); ``past``: cached keys before them."""
    if segment_ids is None:
        return torch.arange(past + 1, past + sq + 1, device=device)[None]
    return document_positions(segment_ids)[:, segment_ids.shape[-1] - sq :] + 1
