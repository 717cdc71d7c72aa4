"""T5's relative position bias (Raffel et al., JMLR 2020, arXiv 1910.10683), unidirectional (causal):

    logits_ij = scale * q_i . k_j + table[bucket(i - j), h]   for j <= i,

a learned scalar per head and per bucket of distance: distances below num_buckets / 2 have a bucket each, longer
ones share logarithmically wider buckets up to ``max_distance``, beyond which all fall in the last bucket. The
bucket function is Mesh TensorFlow's ``_relative_position_bucket`` (as in Hugging Face's and torchscale's T5),
with its logarithm in float32 as theirs, so the buckets are the same integers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .relative_bias import bias_attention


def relative_position_bucket(distance: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """The bucket (int64) of each integer distance i - j >= 0 (negative distances, future keys, share bucket 0)."""
    n = distance.clamp(min=0)
    max_exact = num_buckets // 2
    ratio = n.clamp(min=max_exact).float() / max_exact  # the clamp keeps log finite where the bucket is exact
    large = max_exact + (torch.log(ratio) / math.log(max_distance / max_exact) * (num_buckets - max_exact)).long()
    return torch.where(n < max_exact, n, large.clamp(max=num_buckets - 1))


def t5_bias(
    table: torch.Tensor, query_positions: torch.Tensor, key_positions: torch.Tensor, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """(B|1, H, Sq, Sk) bias table[bucket(p_i - p_j)] for a table (num_buckets, H) and positions (B|1, Sq) of
    the queries and (B|1, Sk) of the keys."""
    distance = query_positions[:, :, None] - key_positions[:, None, :]
    return F.embedding(relative_position_bucket(distance, num_buckets, max_distance), table).permute(0, 3, 1, 2)


def t5_attention(
    q,
    k,
    v,
    table: torch.Tensor,
    num_buckets: int,
    max_distance: int,
    *,
    positions=None,
    segment_ids=None,
    scale=None,
    logit_dropout: float = 0.0,
    impl: str = "auto",
    chunk: int | None = None,
):
    """Causal attention with T5's bias for q (B, H, Sq, D), k, v (B, H, Sk, D) and a table (num_buckets, H);
    positions, documents and paths as in ``relative_bias.bias_attention``."""

    def bias(query_positions, key_positions):
        return t5_bias(table, query_positions, key_positions, num_buckets, max_distance)

    return bias_attention(
        q, k, v, bias, positions=positions, segment_ids=segment_ids, scale=scale, logit_dropout=logit_dropout,
        impl=impl, chunk=chunk,
    )  # fmt: skip
