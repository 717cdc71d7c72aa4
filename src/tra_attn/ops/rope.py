"""RoPE: rotary position embedding (Su et al. 2021, arXiv 2104.09864).

Channel pairs (x_c, x_{c + D/2}) of q and k are rotated by the angle pos * base^(-2c/D) (the
"rotate half" layout), so q_i . k_j depends on positions only through i - j.
"""

from __future__ import annotations

import torch

from .masks import document_positions


def rope_angles(positions: torch.Tensor, dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (..., S, dim) for integer positions (..., S) (per row of a batch: (B, S)); dim must
    be even."""
    if dim % 2:
        raise ValueError(f"rope_angles: dim = {dim}; expected an even head dimension")
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) / dim)
    angles = positions.to(torch.float64)[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (..., S, D) by the angles of ``rope_angles`` (computed in fp64, cast to x's dtype), which
    broadcast against x: (S, D) for every row alike, (B, 1, S, D) per row of x (B, H, S, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def rotate_new_positions(q, k, past: int, segment_ids=None, base: float = 10000.0):
    """q and k (B, H, S, D) of the S positions after ``past`` cached ones, rotated at their positions: past,
    past + 1, ..., or in a packed or padded batch (``segment_ids`` (B, past + S)) their positions in their document,
    counted over its real tokens (layers/rope.py's positions, for the kinds that run on RoPE)."""
    s = q.shape[-2]
    if segment_ids is None:
        cos, sin = rope_angles(torch.arange(past, past + s, device=q.device), q.shape[-1], base)
    else:
        cos, sin = rope_angles(document_positions(segment_ids)[:, None, -s:], q.shape[-1], base)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)
