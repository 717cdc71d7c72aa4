"""ALiBi: attention with linear biases (Press, Smith, Lewis, ICLR 2022, arXiv 2108.12409).

    logits_ij = scale * q_i . k_j - m_h * (i - j)   for j <= i,

with fixed per-head slopes m_h forming a geometric sequence (2^(-8/H), 2^(-16/H), ...; for a head
count that is not a power of two, the slopes of the next lower power of two followed by every other
slope of the next higher one, as in the authors' ``get_slopes``).

In a packed or padded batch (``segment_ids``), i and j are positions in the query's document
(``masks.document_positions``) and keys of other documents or padding are masked. Given ``positions`` (random
positions, ops/positions.py), i and j are those. Given ``distances`` (the randomized ALiBi of Ruoss et al., ACL
2023, as their code has it: ``google-deepmind/randomized_positional_encodings``, ``models/positional_encodings.py``,
``compute_noisy_alibi_encodings_biases``, commit e8c64749d8cad7772dc7ade75b32ef9b2b29b466), i - j becomes the
drawn distance d_{i-j}:

    logits_ij = scale * q_i . k_j - m_h * d_{i-j},   d_0 = 0 < d_1 < ... < d_{S-1} a sorted random subset of [1, N)

Their encoder also adds 0.5 m_h to every earlier key, in their plain ALiBi as well (to tell left from right; their
comment calls it an arbitrary symmetry breaker), whether or not it masks causally. Under a causal mask that is not
a no-op: softmax ignores a constant added to a whole row, so it is a penalty of 0.5 m_h on the query's own key, as
if that key stood at distance 0.5. ``self_offset`` adds it (0.5: theirs; 0, the default: the ALiBi paper's):

    logits_ij = scale * q_i . k_j - m_h * (d_ij - self_offset [j < i])
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .logit_dropout import causal_dropout_attention
from .masks import causal_mask, compute_dtype, document_mask, document_positions, relative_distance
from .positions import drawn_distances


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """The standard geometric ALiBi slopes for ``n_heads`` heads, largest first."""

    def power_of_two_slopes(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if n_heads <= 0:
        raise ValueError(f"alibi_slopes: n_heads = {n_heads}; expected a positive integer")
    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two_slopes(n_heads))
    lower = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two_slopes(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(power_of_two_slopes(lower) + extra)


def offset_distance(dist: torch.Tensor, self_offset: float) -> torch.Tensor:
    """The distances ``dist`` with ``self_offset`` taken from every positive one (every earlier key)."""
    return dist - self_offset * (dist > 0) if self_offset else dist


def alibi_bias(slopes: torch.Tensor, sq: int, sk: int, self_offset: float = 0.0) -> torch.Tensor:
    """(H, Sq, Sk) additive bias: -m_h * (i - j - self_offset [j < i]) on visible keys, -inf on future keys."""
    dist = offset_distance(relative_distance(sq, sk, slopes.device).to(slopes.dtype), self_offset)
    bias = -slopes[:, None, None] * dist
    return bias.masked_fill(~causal_mask(sq, sk, slopes.device), float("-inf"))


def document_alibi_bias(
    slopes: torch.Tensor,
    segment_ids: torch.Tensor | None,
    visible: torch.Tensor,
    positions: torch.Tensor | None = None,
    distances: torch.Tensor | None = None,
    self_offset: float = 0.0,
) -> torch.Tensor:
    """(B, H, Sq, Sk) bias -m_h * (p_i - p_j) with p the given ``positions`` (B, Sk), else the positions in the
    documents of ``segment_ids`` (B, Sk); with ``distances`` (B, Sk), a table of ``positions.random_distances``,
    -m_h * d_{p_i - p_j} instead (``positions.drawn_distances``); less ``self_offset`` on earlier keys; -inf
    outside ``visible`` (B|1, 1, Sq, Sk), ``masks.document_mask``."""
    sq, sk = visible.shape[-2:]
    if distances is not None:
        dist = drawn_distances(distances, segment_ids, sq)
    else:
        positions = document_positions(segment_ids) if positions is None else positions
        dist = positions[:, sk - sq :, None] - positions[:, None, :]
    dist = offset_distance(dist[:, None].to(slopes.dtype), self_offset)
    bias = -slopes[None, :, None, None] * dist
    return bias.masked_fill(~visible, float("-inf"))


def alibi_attention(
    q,
    k,
    v,
    slopes: torch.Tensor,
    scale: float | None = None,
    logit_dropout: float = 0.0,
    segment_ids: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    distances: torch.Tensor | None = None,
    self_offset: float = 0.0,
):
    """Causal ALiBi attention for q (B,H,Sq,D), k/v (B,H,Sk,D), slopes (H,); optional logit dropout,
    ``segment_ids`` (B, Sk) of the keys for packed or padded batches (-1: padding), and ``positions`` (B, Sk)
    of the keys (default: counted from each document's start) or ``distances`` (B, Sk), a drawn distance table
    (``positions.random_distances``) that replaces the distances i - j; ``self_offset`` taken from the distance
    of every earlier key (the randomized-ALiBi authors' 0.5)."""
    sq, sk = q.shape[-2], k.shape[-2]
    slopes = slopes.to(compute_dtype(q.dtype) if logit_dropout else q.dtype)
    if positions is not None and distances is not None:
        raise ValueError("alibi_attention: positions and distances given; expected at most one of them")
    if segment_ids is None and positions is None and distances is None:
        bias, visible = alibi_bias(slopes, sq, sk, self_offset), None
    else:
        causal = causal_mask(sq, sk, q.device)[None, None]
        visible = causal if segment_ids is None else document_mask(segment_ids, sq)
        bias = document_alibi_bias(slopes, segment_ids, visible, positions, distances, self_offset)
    if logit_dropout:
        return causal_dropout_attention(q, k, v, logit_dropout, bias, scale, visible)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
