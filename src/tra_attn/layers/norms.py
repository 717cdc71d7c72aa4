"""RMS normalisation: the model's affine RMSNorm and the parameter-free per-head q/k normalisation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) over the last dimension, x * rsqrt(mean(x^2) + eps) in fp32 (fp64 for fp64 input), no affine
    weight: PyTorch's one rms_norm call (the same values as the five operations it stands for, a fraction of their
    dispatch cost: a decoding step normalises a few dozen values per head). The result is contiguous."""
    xf = x if x.dtype in (torch.float32, torch.float64) else x.float()
    return F.rms_norm(xf, xf.shape[-1:], eps=eps).to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with a learned per-channel weight."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_normalize(x, self.eps) * self.weight
