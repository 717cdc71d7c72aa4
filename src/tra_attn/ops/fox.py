"""Forgetting Attention, the core of the Forgetting Transformer (Lin et al., ICLR 2025, arXiv 2503.02130).

    logits_ij = scale * q_i . k_j + sum_{l=j+1..i} log f_l   for j <= i,

with a per-head, per-position forget gate f_l = sigmoid(w . x_l + b) in (0, 1) taken at the
intermediate (key/time-step) positions. With L = cumsum(log f) the bias is L_i - L_j.

In a packed or padded batch (``segment_ids``) the gate is zeroed (f = 1) on padding and at the first
token of each document, as the authors' code zeroes it on padding, and keys of other documents are
masked: the sum then runs over the query's own document only, and left padding adds exact zeros to L.

``token_shift`` is the key/value shift of the "Pro" layer (layers/fox_pro.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .logit_dropout import causal_dropout_attention
from .masks import causal_mask, compute_dtype, document_mask


def forgetting_bias(log_lambda: torch.Tensor, sq: int, visible: torch.Tensor | None = None) -> torch.Tensor:
    """(B, H, Sq, Sk) bias L_i - L_j from cumulative log gates L (B, H, Sk); -inf outside ``visible`` (the
    causal mask by default)."""
    sk = log_lambda.shape[-1]
    bias = log_lambda[..., sk - sq :, None] - log_lambda[..., None, :]
    visible = causal_mask(sq, sk, log_lambda.device) if visible is None else visible
    return bias.masked_fill(~visible, float("-inf"))


def continues_document(segment_ids: torch.Tensor) -> torch.Tensor:
    """(B, Sk) bool: key l is real and in the document of key l - 1 (False on padding and at a document's first
    token, the row's first key included)."""
    return (segment_ids >= 0) & (segment_ids == F.pad(segment_ids[:, :-1], (1, 0), value=-1))


def document_gates(log_fgate: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """``log_fgate`` (B, H, Sk) with 0 wherever key l does not continue the document of key l - 1 (padding,
    or a document's first token): those gates only ever weigh keys of other documents."""
    return log_fgate.masked_fill(~continues_document(segment_ids)[:, None], 0.0)


def token_shift(z: torch.Tensor, mix: torch.Tensor, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
    """FoX (Pro)'s data-dependent token shift of keys or values z (B, H, Sk, D): (1 - a_l) z_l + a_l z_{l-1} with
    a per-head mix a (B, H, Sk) in [0, 1], z_{l-1} = 0 at the row's first key and, with ``segment_ids`` (B, Sk),
    wherever key l does not continue the document of key l - 1: nothing crosses a document start or comes from
    padding. Computed in the dtype of ``mix`` (fp32 for half inputs), returned in z's."""
    prev = F.pad(z[..., :-1, :], (0, 0, 1, 0))
    if segment_ids is not None:
        prev = prev.masked_fill(~continues_document(segment_ids)[:, None, :, None], 0.0)
    a = mix[..., None]
    return ((1 - a) * z + a * prev).to(z.dtype)


def forgetting_attention(
    q,
    k,
    v,
    log_fgate: torch.Tensor,
    scale: float | None = None,
    logit_dropout: float = 0.0,
    segment_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal forgetting attention; log_fgate (B, H, Sk) <= 0 holds log f for every key position.

    The cumulative sum is taken in fp32 (fp64 for fp64 inputs), as the FoX kernels do. With
    ``logit_dropout`` > 0 the logits are materialised and dropped (ops/logit_dropout.py). ``segment_ids``
    (B, Sk) of the keys (-1: padding) describe a packed or padded batch.
    """
    sq = q.shape[-2]
    visible = None
    if segment_ids is not None:
        log_fgate, visible = document_gates(log_fgate, segment_ids), document_mask(segment_ids, sq)
    log_lambda = torch.cumsum(log_fgate.to(compute_dtype(q.dtype)), dim=-1)
    bias = forgetting_bias(log_lambda, sq, visible)
    if logit_dropout:
        return causal_dropout_attention(q, k, v, logit_dropout, bias, scale, visible)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), scale=scale)
