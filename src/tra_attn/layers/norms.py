"""RMS normalisation: the model's affine RMSNorm and the parameter-free per-head q/k normalisation."""

from __future__ import annotations

import torch
from torch import nn

from ..ops.rms import rms_normalize

__all__ = ["RMSNorm", "rms_normalize"]


class RMSNorm(nn.Module):
    """RMSNorm with a learned per-channel weight."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_normalize(x, self.eps) * self.weight
