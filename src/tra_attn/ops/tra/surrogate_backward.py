"""The keep surrogate's gradient in O(S) memory, strip by strip (chunked path): docs/backward.md, section 7.

The materialised surrogate (``surrogate.py``) adds to the gradient of each score s_il, on the entries whose keep
bit the score decides, ``sigma'_il * dL/dm_il`` with sigma'_il = sigmoid'((s_il - threshold) / tau) / tau and

    dL/dm_il = (dP_il - Delta_i) e_il + g_i P_il
    e_il     = exp(min(l_il - m_i, cap) - (L_i - m_i))     the weight key l would take, kept or not
    P_il     = sum_{j <= l} dZ_ij = T_i - R_il               dZ: the gradient of the logit before dropout

where l_il is the (dropped) logit the key would have, m_i the largest kept logit, L_i the log-sum-exp and
cap = log(dtype max) / 2. The prefix sum P is the row total T_i minus the sum R_il over the keys right of l,
which the right-to-left walk carries from block to block. T_i is 0 without dropout (the softmax's gradient sums
to 0 over a row); with dropout it is f e^{-L_i} (n_i Delta_i - dO_i . V_i), from the number n_i and the values'
sum V_i of the kept keys whose logit the dropout zeroed, which the forward accumulates (``kept_dropped_sums``).
"""

from __future__ import annotations

import math

import torch

from .denormals import EXP_FLOOR, flush_tiny_


def kept_dropped_sums(keep, factors, v_rev, values, count) -> None:
    """Add to ``values`` (N, R, D) and ``count`` (N, R) the values and the number of the strip's kept keys whose
    logit the dropout zeroed (``factors`` 0); ``v_rev`` (N, block, D) holds the strip's values, reversed."""
    dropped_kept = keep * (factors == 0)
    values.baddbmm_(dropped_kept, v_rev)
    count.add_(dropped_kept.sum(-1))


class SurrogateState:
    """What the backward's strips share: the forward's row statistics and the carried sum R of dZ.

    ``sums``: (values, count, 1 / (1 - p)) of ``kept_dropped_sums`` under dropout, else None. The strips'
    scores arrive as (s - threshold) / tau in ws buffer 4 (``scores_transform``).
    """

    def __init__(self, tau: float, threshold: float, m, lse, log_gate, grad_out, delta, sums=None):
        self.scores_transform = (1.0 / tau, -threshold / tau)
        cap = math.log(torch.finfo(m.dtype).max) / 2
        has_key = torch.isfinite(lse)
        self.lse = lse
        # min(l - m, cap) - (L - m) = min(l - L, cap - (L - m)); rows with no kept key get no surrogate gradient
        self.ceiling = cap - torch.where(has_key, lse - m, 0.0)
        self.slope_factor = has_key.to(m.dtype)[..., None] / tau
        self.log_gate = log_gate
        self.right = torch.zeros_like(lse)
        self.total = torch.zeros_like(lse)
        if sums is not None:
            values, count, scale = sums
            inner = count * delta - (grad_out * values).sum(-1)
            self.total = torch.where(has_key, scale * torch.exp(-lse) * inner, 0.0)

    def weights(self, strip, logits, ws) -> torch.Tensor:
        """(N, R, block) e_il = exp(min(l - L, cap - (L - m))) for every key of the strip, in ws buffer 7; on kept
        keys exactly the exact path's p (exp(l - L), clamped below and flushed the same way)."""
        rows = slice(strip.r0, strip.r1)
        out = torch.sub(logits, self.lse[:, rows, None], out=ws.get(7, logits.shape))
        torch.minimum(out, self.ceiling[:, rows, None], out=out)
        return flush_tiny_(out.clamp_(min=EXP_FLOOR[out.dtype]).exp_())

    def score_gradient(self, strip, dlogits, dp, weights, ws) -> torch.Tensor:
        """dZ plus sigma' * ((dP - Delta) e + g P) on the strip's decided entries; updates the carried R.

        ``dp`` holds dP - Delta and is overwritten; ``ws`` buffer 4 holds (s - threshold) / tau."""
        rows = slice(strip.r0, strip.r1)
        shape = dlogits.shape
        sig = ws.get(4, shape).sigmoid_()
        slope = torch.ops.aten.sigmoid_backward.grad_input(self.slope_factor[:, rows], sig, grad_input=ws.get(8, shape))
        decided = strip.decided()
        if decided is not None:
            slope[:, : decided.shape[0]].mul_(decided)
        same = strip.same_document(slope.dtype)
        if same is not None:
            slope.unflatten(0, (same.shape[0], -1)).mul_(same)
        # P = T - R, with R the strict suffix sum of dZ: the carry from the right plus this block's columns
        # left of each one (the block is reversed: an exclusive cumulative sum).
        carried = self.right[:, rows]
        suffix = torch.cumsum(dlogits, -1, out=ws.get(9, shape))
        row_total = suffix[..., -1].clone()
        prefix = torch.sub(dlogits, suffix, out=suffix).add_((self.total[:, rows] - carried)[..., None])
        carried.add_(row_total)
        inner = dp.mul_(weights).addcmul_(prefix, self.log_gate[:, rows, None])
        return torch.addcmul(dlogits, slope, inner, out=inner)
