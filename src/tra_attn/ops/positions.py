"""Token positions for the position-based kinds: given, or counted from each document's start, or plain."""

from __future__ import annotations

import torch

from .masks import document_positions


def key_positions(sk: int, device=None, segment_ids=None, positions=None) -> torch.Tensor:
    """(B or 1, Sk) int64 position of every key (the queries are the last Sq): ``positions`` as given, else the
    position in its document (``segment_ids`` (B, Sk), ``masks.document_positions``), else 0, 1, ..., Sk - 1."""
    if positions is not None:
        return positions
    if segment_ids is not None:
        return document_positions(segment_ids)
    return torch.arange(sk, device=device)[None]
