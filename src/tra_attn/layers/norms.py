"""RMS normalisation: the model's affine RMSNorm, a per-head RMSNorm and the parameter-free q/k normalisation."""

from __future__ import annotations

import torch
from torch import nn

from ..ops.rms import rms_normalize

__all__ = ["HeadRMSNorm", "RMSNorm", "rms_normalize"]


class RMSNorm(nn.Module):
    """RMSNorm with a learned per-channel weight."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_normalize(x, self.eps) * self.weight


class HeadRMSNorm(nn.Module):
    """RMSNorm of each head's channels of (B, H, S, D), with a learned weight per head and channel."""

    def __init__(self, n_heads: int, head_dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n_heads, head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (rms_normalize(x, self.eps) * self.weight[:, None]).to(x.dtype)
