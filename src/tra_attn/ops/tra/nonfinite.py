"""Non-finite inputs (docs/op_contract.md, "Non-finite inputs"): the same answer from every implementation.

Output row r (absolute position i = Sk - Sq + r) is NaN iff q_r or log_gate_r has a non-finite entry,
or some key j <= i has one in k_j or v_j. With segment ids (docs/varlen.md) only the keys j <= i of the
query's own document count, and a padding query is never NaN (it keeps nothing and outputs 0). No other
row can see a bad entry, so the implementations run on inputs whose non-finite entries are replaced by 0,
and the poisoned rows are set to NaN afterwards. Everything is tensor ops on the inputs' device: no host
synchronisation, no graph break.

Gradients: the poisoned rows pass none back (``torch.where``). The replacement passes gradients
through unchanged; a non-finite entry is seen only by poisoned rows, so the implementation's
gradient for it is exactly 0, as for every entry of such a q, k, v or log_gate row.

Cost, next to the O(Sq * Sk * D) op: per input a max and a min reduction and one ``nan_to_num``
copy, and one select forward and backward on the output; on the CPU a clean batch pays only one sum
per input (``all_finite``), which matters when the op is itself one pass over a long cache (decoding).
Full-size ``isfinite``, ``where`` and
``masked_fill`` are avoided on the inputs: on CPU they are several times slower than a reduction or a
copy, and ``nan_to_num``'s own backward would run ``isfinite``. max/min propagate NaN and show +-inf.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..masks import compute_dtype
from ..varlen import document_starts


def bad_rows(x: torch.Tensor) -> torch.Tensor:
    """x (..., D) -> (...) bool: the row holds a NaN or an infinity."""
    if x.shape[-1] == 0:
        return torch.zeros(x.shape[:-1], dtype=torch.bool, device=x.device)
    return ~(torch.isfinite(x.amax(-1)) & torch.isfinite(x.amin(-1)))


class _ZeroNonFinite(torch.autograd.Function):
    """Non-finite entries -> 0 in each input; gradients pass through unchanged."""

    @staticmethod
    def forward(ctx, *tensors):
        out = tuple(torch.nan_to_num(t, nan=0.0, posinf=0.0, neginf=0.0) for t in tensors)
        # An output requires grad only where its input does (as without this function).
        ctx.mark_non_differentiable(*(o for o, needed in zip(out, ctx.needs_input_grad) if not needed))
        return out

    @staticmethod
    def backward(ctx, *grads):
        return grads


def sanitize(q, k, v, log_gate, segment_ids=None):
    """(q, k, v, log_gate) with every non-finite entry replaced by 0, and the (B, H, Sq) bool mask
    of the output rows that must be NaN (None when there are none and nothing needs replacing).
    ``segment_ids`` (B, Sk) int32 or None: a row sees only its own document's keys, and padding rows none.

    On the CPU, outside torch.compile, a clean batch (the usual case) skips the copies: asking whether
    anything is bad costs no device synchronisation there. On other devices and under compile the
    branch-free path always runs, so nothing waits for the device and nothing breaks the graph.
    """
    if q.device.type == "cpu" and not torch.compiler.is_compiling() and all_finite(q, k, v, log_gate):
        return q, k, v, log_gate, None
    bad_key = bad_rows(k) | bad_rows(v)  # (B, H, Sk)
    bad_query = bad_rows(q) | ~torch.isfinite(log_gate)  # (B, H, Sq)
    sq, sk = q.shape[2], k.shape[2]
    # Row r sees keys j <= Sk - Sq + r: it is poisoned once a bad key has appeared up to its position.
    if segment_ids is None:
        sees_bad_key = bad_key.cumsum(-1)[..., sk - sq :] > 0
    else:  # bad real keys in [start of the row's document, its position]; a padding row's start is Sk
        seen = F.pad((bad_key & (segment_ids >= 0)[:, None]).cumsum(-1), (1, 0))  # seen[j]: bad keys before j
        starts = document_starts(segment_ids)[:, None, sk - sq :].expand_as(bad_query).long()
        sees_bad_key = seen[..., sk - sq + 1 :] > torch.gather(seen, -1, starts)
        bad_query = bad_query & (segment_ids[:, None, sk - sq :] >= 0)
    return (*_ZeroNonFinite.apply(q, k, v, log_gate), sees_bad_key | bad_query)


def all_finite(*tensors: torch.Tensor) -> bool:
    """Whether no entry of any tensor is NaN or infinite, from one sum per tensor (one pass, no row reductions):
    a NaN or an infinity makes the sum non-finite. A sum of finite values that overflows answers False too,
    which only sends the call to the exact row-wise check."""
    return all(bool(torch.isfinite(t.sum(dtype=compute_dtype(t.dtype)))) for t in tensors if t.numel())


def poison(out: torch.Tensor, poisoned: torch.Tensor | None) -> torch.Tensor:
    """NaN on every entry of the poisoned rows of out (B, H, Sq, D); they pass no gradient back."""
    return out if poisoned is None else torch.where(poisoned[..., None], float("nan"), out)
