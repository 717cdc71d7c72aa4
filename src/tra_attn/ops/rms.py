"""The parameter-free RMS normalisation of q and k per head, as TRA (and QK-norm) use it."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) over the last dimension, x * rsqrt(mean(x^2) + eps) in fp32 (fp64 for fp64 input), no affine
    weight: PyTorch's one rms_norm call (the same values as the five operations it stands for, a fraction of their
    dispatch cost: a decoding step normalises a few dozen values per head)."""
    xf = x if x.dtype in (torch.float32, torch.float64) else x.float()
    return F.rms_norm(xf, xf.shape[-1:], eps=eps).to(x.dtype)
