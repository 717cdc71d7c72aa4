"""Dropout on the pre-softmax attention logits: the TRA authors' placement, for every attention kind.

The notebook computes logits = scores + positional term, drops each with probability p (kept ones are
scaled by 1 / (1 - p), dropped ones become 0 and stay in the softmax), then masks and normalises.
This needs the materialised (Sq, Sk) logits, so a kind with this dropout trains on its reference path
(SDPA and the fused TRA kernels have no such hook); evaluation never drops anything.
"""

from __future__ import annotations

import torch

from .masks import causal_mask, compute_dtype, dropped_softmax

IMPLS = ("auto", "naive", "chunked")  # the implementations of an op with a materialised and a chunked path


def check_impl(op: str, impl, logit_dropout: float, materialised: str = "logits") -> None:
    """``impl`` one of ``IMPLS``, and not "chunked" with logit dropout (which needs the ``materialised`` (Sq, Sk)
    tensor): else a ValueError naming ``op``."""
    if impl not in IMPLS:
        raise ValueError(f"{op}: impl = {impl!r}; expected one of {IMPLS}")
    if impl == "chunked" and logit_dropout:
        raise ValueError(
            f"{op}: impl = 'chunked' with logit_dropout = {logit_dropout}; expected impl 'naive' or 'auto' (logit "
            f"dropout needs the materialised {materialised})"
        )


def causal_dropout_attention(
    q,
    k,
    v,
    p: float,
    bias: torch.Tensor | None = None,
    scale: float | None = None,
    keep: torch.Tensor | None = None,
):
    """Causal softmax attention (plus an additive ``bias`` such as ALiBi's or FoX's) with logit dropout p.

    The materialised training path of the kinds that otherwise run on SDPA; accumulates in fp32 (fp64
    for fp64 inputs) and returns the dtype of q. ``keep``: the visible keys (broadcast to (B, H, Sq, Sk)),
    the causal mask by default (a packed or padded batch passes ``masks.document_mask``).
    """
    cdt = compute_dtype(q.dtype)
    sq, sk = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = scale * (q.to(cdt) @ k.to(cdt).transpose(-1, -2))
    keep = causal_mask(sq, sk, q.device) if keep is None else keep
    if bias is not None:
        logits = logits + torch.where(keep, bias.to(cdt), 0.0)
    return (dropped_softmax(logits, keep, p) @ v.to(cdt)).to(q.dtype)
