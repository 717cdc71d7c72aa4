"""Variable-length batches as one tensor: segment ids, a document id per key position (negative: padding).

Packed documents (flash-attn's ``cu_seqlens``, B = 1) and padded batches (a (B, S) key padding mask, 1 for
real tokens, Hugging Face's ``attention_mask``) both become ``segment_ids`` (B, S): key j is visible to
query i only if both have the same non-negative id. Every attention op takes that one form, so the keep
rule is decided identically everywhere (docs/varlen.md). A leaf: imports nothing from the package.

Documents are contiguous: along a row the non-negative ids never decrease (padding, -1, may sit anywhere
at this level; the model accepts only left or right padding).
"""

from __future__ import annotations

import torch

PADDING = -1  # the segment id of a padding position


def _fail(who: str, argument: str, value, expected: str):
    raise ValueError(f"{who}: {argument} = {value}; expected {expected}")


def check_cu_seqlens(cu_seqlens, total: int, batch: int, device, who: str, check_values: bool = True) -> None:
    """``cu_seqlens`` (N+1,) int32 on ``device``: 0 = c_0 < c_1 < ... < c_N = ``total``, with B = 1."""
    if not isinstance(cu_seqlens, torch.Tensor):
        _fail(who, "cu_seqlens", type(cu_seqlens).__name__, "a torch.Tensor (N+1,) of int32 document offsets")
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2:
        _fail(who, "cu_seqlens.shape", tuple(cu_seqlens.shape), "(N+1,) with N >= 1 documents")
    if cu_seqlens.dtype != torch.int32:
        _fail(who, "cu_seqlens.dtype", cu_seqlens.dtype, "torch.int32 (flash-attn's convention)")
    if cu_seqlens.device != torch.device(device):
        _fail(who, "cu_seqlens.device", cu_seqlens.device, f"the device of the inputs, {device}")
    if batch != 1:
        _fail(who, "batch size with cu_seqlens", batch, "1 (documents are concatenated along the sequence)")
    if not check_values:
        return
    values = cu_seqlens.tolist()
    if values[0] != 0:
        _fail(who, "cu_seqlens[0]", values[0], "0")
    if values[-1] != total:
        _fail(who, "cu_seqlens[-1]", values[-1], f"the sequence length {total}")
    steps = [b - a for a, b in zip(values, values[1:])]
    if min(steps) <= 0:
        bad = steps.index(min(steps))
        _fail(
            who,
            f"cu_seqlens[{bad}:{bad + 2}]",
            values[bad : bad + 2],
            "strictly increasing offsets (every document at least one token long)",
        )


def check_padding_mask(mask, batch: int, total: int, device, who: str, name: str, check_values: bool = True):
    """A (B, S) mask of 1 (real token) and 0 (padding), bool or integer, with a real token in every row."""
    if not isinstance(mask, torch.Tensor):
        _fail(who, name, type(mask).__name__, f"a torch.Tensor ({batch}, {total}) of 1 (token) and 0 (padding)")
    if tuple(mask.shape) != (batch, total):
        _fail(who, f"{name}.shape", tuple(mask.shape), f"(B, S) = ({batch}, {total})")
    if mask.dtype.is_floating_point or mask.dtype.is_complex:
        _fail(who, f"{name}.dtype", mask.dtype, "bool or an integer dtype of 1 (token) and 0 (padding)")
    if mask.device != torch.device(device):
        _fail(who, f"{name}.device", mask.device, f"the device of the inputs, {device}")
    if not check_values or mask.dtype == torch.bool and bool(mask.any(-1).all()):
        return
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        _fail(who, name, f"values {sorted(set(mask.unique().tolist()))[:6]}", "only 1 (token) and 0 (padding)")
    empty = (~mask.bool().any(-1)).nonzero().flatten().tolist()
    if empty:
        _fail(who, f"{name}[{empty[0]}]", "all zeros", "at least one real token (1) in every row")


def check_segment_ids(segment_ids, batch: int, total: int, device, who: str, check_values: bool = True) -> None:
    """(B, S) integer document ids, negative for padding; the non-negative ids of a row never decrease."""
    if not isinstance(segment_ids, torch.Tensor):
        _fail(who, "segment_ids", type(segment_ids).__name__, f"a torch.Tensor ({batch}, {total}) of integer ids")
    if tuple(segment_ids.shape) != (batch, total):
        _fail(who, "segment_ids.shape", tuple(segment_ids.shape), f"(B, S) = ({batch}, {total})")
    if segment_ids.dtype.is_floating_point or segment_ids.dtype.is_complex or segment_ids.dtype == torch.bool:
        _fail(who, "segment_ids.dtype", segment_ids.dtype, "an integer dtype (document id; negative: padding)")
    if segment_ids.device != torch.device(device):
        _fail(who, "segment_ids.device", segment_ids.device, f"the device of the inputs, {device}")
    if not check_values:
        return
    # Running maximum of the real ids so far: a real id below it means a document resumed after another.
    real = torch.where(segment_ids >= 0, segment_ids, torch.iinfo(segment_ids.dtype).min)
    behind = (segment_ids >= 0) & (segment_ids < real.cummax(-1).values)
    if bool(behind.any()):
        row, col = behind.nonzero()[0].tolist()
        _fail(who, f"segment_ids[{row}, {col}]", int(segment_ids[row, col]), "non-decreasing document ids along a row")


def segment_ids_from(
    batch: int,
    total: int,
    device,
    *,
    cu_seqlens: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    segment_ids: torch.Tensor | None = None,
    who: str = "threshold_relative_attention",
    mask_name: str = "key_padding_mask",
    check_values: bool = True,
) -> torch.Tensor | None:
    """The (B, S) int32 segment ids of the given forms (None when none is given), after checking them.

    ``cu_seqlens`` and ``segment_ids`` are exclusive; a padding mask combines with either (its zeros become
    PADDING). ``check_values`` adds the checks that read the data (a host synchronisation on a GPU).
    """
    if cu_seqlens is not None and segment_ids is not None:
        _fail(who, "cu_seqlens and segment_ids", "both given", "at most one description of the documents")
    seg = None
    if cu_seqlens is not None:
        check_cu_seqlens(cu_seqlens, total, batch, device, who, check_values)
        starts = torch.zeros(total, dtype=torch.int32, device=device)
        starts[cu_seqlens[1:-1].long()] = 1  # strictly increasing offsets: each start marked once
        seg = starts.cumsum(0, dtype=torch.int32)[None]
    elif segment_ids is not None:
        check_segment_ids(segment_ids, batch, total, device, who, check_values)
        seg = segment_ids.to(torch.int32).clamp(min=PADDING)
    if key_padding_mask is not None:
        check_padding_mask(key_padding_mask, batch, total, device, who, mask_name, check_values)
        base = torch.zeros(batch, total, dtype=torch.int32, device=device) if seg is None else seg
        seg = torch.where(key_padding_mask.bool(), base, PADDING)
    return seg


def segment_mask(segment_ids: torch.Tensor, sq: int) -> torch.Tensor:
    """(B, 1, Sq, Sk) bool: query r (position Sk - Sq + r) and key j share a non-negative segment id."""
    keys = segment_ids[:, None, None, :]
    queries = segment_ids[:, None, -sq:, None] if sq else segment_ids[:, None, :0, None]
    return (keys == queries) & (keys >= 0)


def document_starts(segment_ids: torch.Tensor) -> torch.Tensor:
    """(B, S) int32: the first position of each real position's document; S (no key) for padding positions.

    The keys a position can keep lie in [start, position]: the fast paths skip every key block left of the
    earliest start of their queries. Relies on contiguous documents (a document's first position is where
    its id first appears); padding inside a document does not move its start.
    """
    b, s = segment_ids.shape
    real = segment_ids >= 0
    ids = torch.where(real, segment_ids, PADDING)
    # Running maximum of the real ids before each position: the id of the last real position so far.
    before = torch.cat([torch.full_like(ids[:, :1], PADDING), ids.cummax(-1).values[:, :-1]], -1)
    positions = torch.arange(s, dtype=torch.int32, device=segment_ids.device).expand(b, s)
    first = torch.where(real & (ids != before), positions, 0).cummax(-1).values
    return torch.where(real, first, s).to(torch.int32)
