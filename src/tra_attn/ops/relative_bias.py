"""Softmax attention plus an additive bias of the query's and the key's positions (T5, FIRE, KERPLE):

    out_i = sum_{j <= i} softmax_j(scale * q_i . k_j + b_h(p_i, p_j)) v_j

``bias_fn(query_positions (B|1, Sq), key_positions (B|1, Sk)) -> (B|1, H, Sq, Sk)`` computes b, unmasked: its
values at future keys are ignored, but must be finite with finite gradients. Two paths, same result:

- ``naive``: the whole (B, H, Sq, Sk) bias materialised, then PyTorch SDPA with it as a float mask.
- ``chunked``: blocks of ``chunk`` queries, each attending to the keys up to its last query only (a causal
  layout skips the rest) with its own block of bias, under activation checkpointing when gradients are needed:
  memory O(chunk * Sk) instead of O(Sq * Sk), and the bias is computed twice in training.

Positions come from ``ops/positions.py``: given (random positions in training), per document, or 0, 1, ...
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .logit_dropout import IMPLS, causal_dropout_attention
from .masks import causal_mask, document_mask
from .positions import key_positions

BiasFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
CHUNK = 256  # queries per block of the chunked path (benchmarks/relative_bias.py measures it)


def _block(q, k, v, bias_fn: BiasFn, positions, segment_ids, scale) -> torch.Tensor:
    """Attention of the last Sq of Sk positions (bottom-right causal, documents masked), its bias materialised."""
    sq, sk = q.shape[-2], k.shape[-2]
    visible = causal_mask(sq, sk, q.device) if segment_ids is None else document_mask(segment_ids, sq)
    bias = bias_fn(positions[:, sk - sq :], positions).masked_fill(~visible, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), scale=scale)


def bias_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias_fn: BiasFn,
    *,
    positions: torch.Tensor | None = None,
    segment_ids: torch.Tensor | None = None,
    scale: float | None = None,
    logit_dropout: float = 0.0,
    impl: str = "auto",
    chunk: int | None = None,
) -> torch.Tensor:
    """Causal attention with the bias ``bias_fn`` for q (B, H, Sq, D), k, v (B, H, Sk, D), Sq <= Sk.

    ``positions`` (B, Sk): the position of every key (random positions in training); else positions count from
    each document's start (``segment_ids`` (B, Sk), -1 on padding) or from 0. ``impl``: ``naive``, ``chunked``
    or ``auto`` (chunked when there are more than ``chunk`` queries; default ``CHUNK``, read at the call). With
    ``logit_dropout`` > 0 the logits are materialised and dropped (ops/logit_dropout.py).
    """
    if impl not in IMPLS:
        raise ValueError(f"bias_attention: impl = {impl!r}; expected one of {IMPLS}")
    sq, sk = q.shape[-2], k.shape[-2]
    chunk = CHUNK if chunk is None else chunk
    positions = key_positions(sk, q.device, segment_ids, positions)
    if logit_dropout:
        visible = None if segment_ids is None else document_mask(segment_ids, sq)
        bias = bias_fn(positions[:, sk - sq :], positions)
        return causal_dropout_attention(q, k, v, logit_dropout, bias, scale, visible)
    if impl == "naive" or (impl == "auto" and sq <= chunk):
        return _block(q, k, v, bias_fn, positions, segment_ids, scale)
    remember = torch.is_grad_enabled()  # recompute each block's bias and weights in the backward
    outputs = []
    for start in range(0, sq, chunk):
        end = sk - sq + min(start + chunk, sq)  # keys up to the block's last query
        args = (q[..., start : start + chunk, :], k[..., :end, :], v[..., :end, :], bias_fn, positions[:, :end])
        args += (None if segment_ids is None else segment_ids[:, :end], scale)
        outputs.append(checkpoint(_block, *args, use_reentrant=False) if remember else _block(*args))
    return torch.cat(outputs, dim=-2)
