"""Non-finite inputs (docs/op_contract.md, "Non-finite inputs"): the same answer from every implementation.

Output row r (absolute position i = Sk - Sq + r) is NaN iff q_r or log_gate_r has a non-finite entry,
or some key j <= i has one in k_j or v_j. Every other row cannot see a bad entry, so the
implementations run on inputs whose non-finite entries are replaced by 0, and the poisoned rows are
set to NaN afterwards. Everything is tensor ops on the inputs' device: no host synchronisation, no
graph break under torch.compile. Through ``torch.where`` the poisoned rows pass no gradient back and
the non-finite entries get exactly zero gradient.
"""

from __future__ import annotations

import torch


def sanitize(q, k, v, log_gate):
    """(q, k, v, log_gate) with every non-finite entry replaced by 0, and the (B, H, Sq) bool mask
    of the output rows that must be NaN."""
    q_ok, k_ok, v_ok, g_ok = (torch.isfinite(t) for t in (q, k, v, log_gate))
    bad_key = ~(k_ok.all(-1) & v_ok.all(-1))  # (B, H, Sk)
    sq, sk = q.shape[2], k.shape[2]
    # Row r sees keys j <= Sk - Sq + r: it is poisoned once a bad key has appeared up to its position.
    sees_bad_key = bad_key.cumsum(-1)[..., sk - sq :] > 0
    poisoned = sees_bad_key | ~q_ok.all(-1) | ~g_ok
    clean = [torch.where(ok, t, 0.0) for t, ok in ((q, q_ok), (k, k_ok), (v, v_ok), (log_gate, g_ok))]
    return (*clean, poisoned)


def poison(out: torch.Tensor, poisoned: torch.Tensor) -> torch.Tensor:
    """NaN on every entry of the poisoned rows of out (B, H, Sq, D); zero gradient through them."""
    return torch.where(poisoned[..., None], float("nan"), out)
