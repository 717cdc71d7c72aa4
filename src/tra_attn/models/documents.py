"""The documents of a forward: the segment ids of every key it attends to, checked once at the model's boundary.

``TransformerLM`` takes a variable-length batch in three forms, which ops/varlen.py turns into one (B, S)
segment-id tensor (-1: padding): ``attention_mask`` (B, S) of 1 (token) and 0 (padding), Hugging Face's;
``cu_seqlens`` (N+1,) int32 offsets of N documents packed in one row (B = 1), flash-attn's; ``segment_ids``
(B, S), documents packed per row (contiguous, non-decreasing ids). The model accepts left or right padding
only: the real tokens of a row are contiguous (docs/padding_and_packing.md says why).

With a KV cache the ids of the cached keys live in ``KVCache.segment_ids``; a forward continues each row's
last document, so decoding needs no mask at all.
"""

from __future__ import annotations

import torch

from ..layers import KVCache
from ..ops.varlen import PADDING, segment_ids_from

WHO = "TransformerLM"


def forward_segment_ids(
    input_ids: torch.Tensor,
    cache: KVCache | None,
    attention_mask: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
    segment_ids: torch.Tensor | None,
) -> torch.Tensor | None:
    """(B, past + S) int32 segment ids of the cached keys and the new tokens, also stored in ``cache``; None when
    the forward is one document per row without padding and the cache holds no segment ids (the fast path).

    New tokens without ``segment_ids`` continue each row's last cached document: ``cu_seqlens`` numbers its
    documents from that one, ``attention_mask``'s real tokens belong to it. ``segment_ids`` are taken as given
    (the cache's numbering). The checks read the new tokens' ids only (one host synchronisation, two with a
    padding mask; none under torch.compile, which then always takes the segment-id path).
    """
    b, s = input_ids.shape
    past = 0 if cache is None else cache.length
    cached = None if cache is None else cache.segment_ids
    if attention_mask is None and cu_seqlens is None and segment_ids is None and cached is None:
        return None
    check = not torch.compiler.is_compiling()
    new = segment_ids_from(
        b,
        s,
        input_ids.device,
        cu_seqlens=cu_seqlens,
        key_padding_mask=attention_mask,
        segment_ids=segment_ids,
        who=WHO,
        mask_name="attention_mask",
        check_values=check,
    )
    if new is None:
        new = torch.zeros(b, s, dtype=torch.int32, device=input_ids.device)
    if past and segment_ids is None and cached is not None:  # a cache without ids holds one document: id 0
        new = torch.where(new >= 0, new + cached.amax(-1, keepdim=True).clamp(min=0), new)
    source = "attention_mask" if attention_mask is not None else "segment_ids"
    if check and check_layout(new, source, continuing=past > 0) and cached is None:
        return None
    if past:
        before = torch.zeros(b, past, dtype=torch.int32, device=new.device) if cached is None else cached
        new = torch.cat([before, new], dim=1)
    if cache is not None:
        cache.segment_ids = new
    return new


def check_layout(segment_ids: torch.Tensor, name: str, continuing: bool = False) -> bool:
    """Refuse a row with padding between real tokens, or with no real token; True when every row is a single
    document without padding (with ``continuing``: document 0, the one a cache without ids holds)."""
    real = segment_ids >= 0
    s = segment_ids.shape[1]
    index = torch.arange(s, device=segment_ids.device)
    count = real.sum(-1)
    span = torch.where(real, index, -1).amax(-1) - torch.where(real, index, s).amin(-1) + 1
    one = segment_ids.amin(-1) == segment_ids.amax(-1)
    if continuing:
        one &= segment_ids[:, 0] == 0
    holes, empty, plain = torch.stack([((count > 0) & (span != count)).any(), (count == 0).any(), one.all()]).tolist()
    if holes:
        row = int(((count > 0) & (span != count)).nonzero()[0])
        raise ValueError(
            f"{WHO}: {name}[{row}] has padding between real tokens ({_shown(segment_ids[row])}); expected left or "
            "right padding only (the real tokens of each row contiguous)"
        )
    if empty:
        row = int((count == 0).nonzero()[0])
        raise ValueError(f"{WHO}: {name}[{row}] is all padding; expected at least one real token in every row")
    return bool(plain)


def _shown(row: torch.Tensor) -> str:
    """A row of segment ids as 1 (token) and 0 (padding), shortened."""
    bits = "".join("0" if v == PADDING else "1" for v in row[:40].tolist())
    return f"real/padding {bits}{'...' if row.numel() > 40 else ''}"
