"""The CPU's slow floating-point paths the chunked op avoids: exp of very negative arguments, subnormal operands.

exp() of inputs below about -87 (fp32) takes a slow path (about 30x): the op clamps its exponents at
``EXP_FLOOR`` first (weights below exp(floor) of their row are negligible). Backward weights too small to
matter are then flushed to zero, so that no product reaches a subnormal number. The backward's weights
p = exp(l - L) <= 1 are relative to their row's total. A weight clamped at the exp floor (exp(-80) in fp32)
times a typical gradient (1e-5) is subnormal, and x86 CPUs multiply subnormal operands up to 100 times
slower: a language model's TRA backward ran 6 times slower on them (docs/backward.md, section 8). Weights
below 2^-60 (fp32; 2^-900 in fp64) contribute less than S^2 2^-60 < 3e-10 of their row's gradient up to
S = 16k keys, far below fp32's resolution; with them zeroed, a product is subnormal only for gradients
below 2^-66 (1e-20).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

EXP_FLOOR = {torch.float32: -80.0, torch.float64: -700.0}
FLUSH_BELOW = {torch.float32: 2.0**-60, torch.float64: 2.0**-900}


def flush_tiny_(weights: torch.Tensor) -> torch.Tensor:
    """Zero the entries of ``weights`` (>= 0) at or below ``FLUSH_BELOW`` for their dtype, in place."""
    return F.threshold_(weights, FLUSH_BELOW[weights.dtype], 0.0)
