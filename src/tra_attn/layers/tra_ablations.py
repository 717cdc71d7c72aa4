"""TRA ablations: each removes or moves one ingredient of the TRA layer (layers/tra.py).

- ``tra_keygate``: the forget gate is taken at each kept key between j and i (FoX-style),
  logits_ij = s_ij + sum over kept l in [j, i] of g_l. Materialised O(S^2) reference op (so no ``impl``);
  the keep rule, windows included, is TRA's; no keep surrogate.
- ``tra_nothreshold``: no threshold; every causal key is kept, so c_ij = i - j + 1 and the bias is
  g_i (i - j + 1): a data-dependent ALiBi. No threshold, so no threshold options (dense heads, windows).
- ``tra_nodistance``: the threshold only, no distance term (NoPE plus selective sparsity), so no gate.

Each declares exactly the TRA options it honours (``TRAOptions.without``).

In a packed or padded batch every ablation keeps only real keys of the query's document (the ops'
``segment_ids``), so ``tra_keygate`` sums the gates of that document's kept keys only.
"""

from __future__ import annotations

import torch

from ..ops.tra.contract import Documents, KeepRule, TrainingAids
from ..ops.tra.key_gate import tra_key_gate_naive
from .tra import TRAAttention, TRAOptions

THRESHOLD_OPTIONS = ("threshold", "dense_heads", "local_window", "dense_window", "threshold_warmup", "keep_surrogate")
THRESHOLD_OPTIONS += ("threshold_shift", "keep_penalty", "keep_margin")
TRAKeyGateOptions = TRAOptions.without("TRAKeyGateOptions", "impl", "keep_surrogate")
TRANoThresholdOptions = TRAOptions.without("TRANoThresholdOptions", *THRESHOLD_OPTIONS)
TRANoDistanceOptions = TRAOptions.without("TRANoDistanceOptions", "gate_bias_init")


class TRAKeyGateAttention(TRAAttention):
    Options = TRAKeyGateOptions

    def attend(self, x, q, k, v, cache, segment_ids=None):
        q, k = self.normalize(q, k)
        k, v, extras = self.with_cache(cache, k, v, log_gate=self.log_gate(x))
        return self.by_heads(q, k, v, extras["log_gate"], segment_ids)

    def op(self, q, k, v, key_log_gate, threshold: float, local_window: int = 0, sliding_window: int = 0, **documents):
        keep = KeepRule(threshold, local_window, sliding_window)
        contract = {"keep": keep, "documents": Documents(documents.get("segment_ids"))}
        aids = TrainingAids(logit_dropout=self.logit_dropout())
        return tra_key_gate_naive(q, k, v, key_log_gate, scale=self.head_dim**-0.5, **contract, aids=aids)


class TRANoThresholdAttention(TRAAttention):
    Options = TRANoThresholdOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.threshold = float("-inf")


class TRANoDistanceAttention(TRAAttention):
    Options = TRANoDistanceOptions
    has_gate = False

    def log_gate(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.new_zeros((b, self.n_heads, s), dtype=torch.float32)
