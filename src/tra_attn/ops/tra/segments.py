"""Segment ids as the fast paths read them (docs/varlen.md): per key, per query, and where each query's
document starts, plus the chunked walk's plan of which rows and masks each key block needs.

A key j is kept for query i only if both carry the same non-negative id. Documents are contiguous, so a
query keeps no key left of its document's start: key blocks left of the earliest start of a query block
(Triton) or a strip's rows (chunked) are never visited, and packed documents cost no work across their
boundaries.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..varlen import document_starts


class Segments(NamedTuple):
    """The (B, ...) int32 tensors an implementation reads, all contiguous. ``starts`` is in key positions."""

    keys: torch.Tensor  # (B, Sk): the document id of each key (negative: padding)
    queries: torch.Tensor  # (B, Sq): the document id of each query
    starts: torch.Tensor  # (B, Sq): the leftmost key a query can keep (Sk: none, for a padding query)

    def split(self, first: int, n: int, size: int) -> Segments:
        """The segments of ``n`` consecutive key splits of ``size`` keys from key ``first``, as n batch entries
        per batch entry (split-KV decoding): the queries are unchanged, the starts move into each split."""
        b, sq = self.queries.shape
        keys = self.keys[:, first : first + n * size].reshape(b * n, size)
        queries = self.queries[:, None].expand(b, n, sq).reshape(b * n, sq)
        offsets = first + size * torch.arange(n, device=self.starts.device, dtype=torch.int32)
        starts = (self.starts[:, None] - offsets[None, :, None]).clamp(0, size).reshape(b * n, sq)
        return Segments(keys.contiguous(), queries.contiguous(), starts.to(torch.int32).contiguous())


def segments_of(segment_ids: torch.Tensor | None, sq: int) -> Segments | None:
    """The op's (B, Sk) segment ids (``ops/varlen.py``) for queries at the last ``sq`` positions."""
    if segment_ids is None:
        return None
    ids = segment_ids.to(torch.int32).contiguous()
    sk = ids.shape[1]
    return Segments(ids, ids[:, sk - sq :].contiguous(), document_starts(ids)[:, sk - sq :].contiguous())


def _constant_runs(ids: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, n) whether ids[:, lo:hi] is one non-negative id, and ids[:, lo] (for hi > lo; lo < S)."""
    changes = F.pad((ids[:, 1:] != ids[:, :-1]).cumsum(-1), (2, 0))  # changes[r]: changes at t in [1, r)
    padding = F.pad((ids < 0).cumsum(-1), (1, 0))  # padding[r]: padding positions t < r
    hi = torch.maximum(hi, lo + 1)
    constant = (changes[:, hi] == changes[:, lo + 1]) & (padding[:, hi] == padding[:, lo])
    return constant, ids[:, lo]


class StripPlan:
    """For each key block [j0, j1) of the chunked walk (``chunked.py``): the end of the rows that can keep one
    of its keys, and whether its strip needs the segment mask at all; computed once per call (one host
    synchronisation) and shared by the forward and the backward, so both see the same strips.

    Rows whose document starts right of the block keep none of its keys. The suffix minimum of the starts
    is non-decreasing, so the rows that can form a prefix, cut at ``rows_end``; with many documents a strip
    holds about one document's rows. A strip inside one document (its keys and rows share one id) needs no
    mask. Under torch.compile nothing is read on the host (a graph break): every strip is walked and masked.
    """

    def __init__(self, segments: Segments, sq: int, sk: int, block: int, sliding_window: int):
        self.segments = segments
        self.block = block
        self.whole = False  # every position of every batch row is one real document (the ids bind nothing)
        if torch.compiler.is_compiling():  # a host read would break the graph: skip nothing, mask every strip
            blocks = len(range(0, sk, block))
            self.first_key, self.rows_end, self.masked = 0, [sq] * blocks, [True] * blocks
            return
        b, device = segments.keys.shape[0], segments.keys.device
        j0 = torch.arange(0, sk, block, device=device)
        j1 = (j0 + block).clamp(max=sk)
        reach = segments.starts.flip(-1).cummin(-1).values.flip(-1)
        last_key = (j1 - 1).to(torch.int32).expand(b, -1).contiguous()
        r1 = torch.searchsorted(reach, last_key, right=True).amax(0) if sq else torch.zeros_like(j0)
        if sliding_window:  # the strip's own window cut (chunked._Strip)
            r1 = torch.minimum(r1, (j1 - 1 + sliding_window - (sk - sq)).clamp(min=0))
        r0 = (j0 - (sk - sq)).clamp(min=0)
        masked = j0 >= 0
        if sq and sk:
            rows_one, row_id = _constant_runs(segments.queries, r0, r1)
            keys_one, key_id = _constant_runs(segments.keys, j0, j1)
            masked = ~(rows_one & keys_one & (row_id == key_id)).all(0)
        self.first_key = int(reach[:, 0].min()) if sq and sk else 0
        self.rows_end = r1.tolist()
        self.masked = masked.tolist()
        self.whole = bool(((segments.keys == segments.keys[:, :1]) & (segments.keys >= 0)).all())

    def mask(self, r0: int, r1: int, j0: int, j1: int, dtype) -> torch.Tensor | None:
        """(B, 1, r1 - r0, j1 - j0) 0/1: row and key (reversed, as in the strip) share a document; None when
        every entry is 1."""
        if not self.masked[j0 // self.block]:
            return None
        keys = self.segments.keys[:, j0:j1].flip(-1)
        same = (self.segments.queries[:, r0:r1, None] == keys[:, None, :]) & (keys >= 0)[:, None, :]
        return same[:, None].to(dtype)
