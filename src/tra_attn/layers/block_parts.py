"""Parts of the attention block that are not the attention mechanism, as options of every kind (ModelConfig's
``output_gate``, ``output_norm`` and ``kv_shift``): FoX Pro's and gated attention's output gate, FoX Pro's
per-head output norm and its token shift of keys and values, so that a comparison can give every method the block
its best rival has (docs/model.md).

    k_l, v_l = (1 - a_l) K_l + a_l K_{l-1},  (1 - b_l) V_l + b_l V_{l-1}   a, b = sigmoid(x . u_h), sigmoid(x . u'_h)
    y_i      = W_o (N_h(o_i) * sigmoid(x_i W_g))                          (the norm and the gate each optional)

As FoX Pro's authors' layer (zhixuan-lin/forgetting-transformer at 883f260c, ``ShiftLinear``, ``group_norm_gated``;
layers/fox_pro.py holds the citations): the mixes are one scalar per head and position from bias-free projections of
x, K_{l-1} = V_{l-1} = 0 at a row's first token and at every document's first token of a packed or padded batch,
and the shift comes before the kind's own handling of keys (its norm, its rotation). N_h is RMSNorm over each
head's channels with a weight per head and channel, W_g a bias-free d_model x d_model map; gated attention's
authors gate the same way (its "elementwise" gate). Their weights take the model's initialisation of every linear
map, as the authors' ``_init_weights`` does. With a KV cache the layer keeps each row's last unshifted key and
value (``LayerCache.state``), so decoding continues the shift exactly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.fox import token_shift
from ..ops.masks import compute_dtype
from .cache import LayerCache
from .norms import HeadRMSNorm

PARTS = ("output_gate", "output_norm", "kv_shift")


class KVShift(nn.Module):
    """FoX Pro's data-dependent token shift of keys and values, continued across forwards through the cache."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.k_mix = nn.Linear(d_model, n_heads, bias=False)
        self.v_mix = nn.Linear(d_model, n_heads, bias=False)

    def forward(self, x, k, v, cache: LayerCache | None, segment_ids: torch.Tensor | None):
        """Shifted k, v (B, H, S, D) of the new positions; the row's previous key and value come from the cache."""
        past = 0 if cache is None else cache.length
        b, h, s, d = k.shape
        if past:
            before_k, before_v = cache.state["shift_k"], cache.state["shift_v"]
        else:
            before_k = before_v = k.new_zeros(b, h, 1, d)
        if cache is not None:
            cache.state.update(shift_k=k[..., -1:, :], shift_v=v[..., -1:, :])
        segments = None
        if segment_ids is not None:
            segments = segment_ids[:, -(s + 1) :] if past else F.pad(segment_ids, (1, 0), value=-1)
        shifted = []
        for z, before, proj in ((k, before_k, self.k_mix), (v, before_v, self.v_mix)):
            mix = torch.sigmoid(proj(x).to(compute_dtype(x.dtype))).transpose(1, 2)  # (B, H, S)
            z = torch.cat([before, z], dim=-2)
            shifted.append(token_shift(z, F.pad(mix, (1, 0)), segments)[..., 1:, :])
        return shifted[0], shifted[1]


class OutputGate(nn.Module):
    """The per-head output norm and the output gate sigmoid(x W_g), each optional, on (B, H, S, D) outputs."""

    def __init__(self, d_model: int, n_heads: int, eps: float, gate: bool, norm: bool):
        super().__init__()
        self.n_heads = n_heads
        self.norm = HeadRMSNorm(n_heads, d_model // n_heads, eps) if norm else None
        self.gate = nn.Linear(d_model, d_model, bias=False) if gate else None

    def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if self.norm is not None:
            out = self.norm(out)
        if self.gate is not None:
            b, s, _ = x.shape
            gate = self.gate(x).view(b, s, self.n_heads, -1).transpose(1, 2)
            out = out * torch.sigmoid(gate).to(out.dtype)
        return out
