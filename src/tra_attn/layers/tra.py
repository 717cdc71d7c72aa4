"""Threshold Relative Attention layer (Opper, Fernandez, Smolensky, Gao, TMLR 2025, arXiv 2503.23174).

    q_i, k_j = RMSNorm(q_i), RMSNorm(k_j)          (per head, no affine weight)
    s_ij     = q_i . k_j / sqrt(D),   kept iff j <= i and s_ij > threshold (0)
    c_ij     = number of kept keys in [j, i]
    g_i      = logsigmoid(w_h . x_i + b_h)          (per head, at the query position)
    out_i    = sum over kept j of softmax_j(s_ij + g_i c_ij) v_j     (0 if nothing is kept)

The authors' reference semantics; no other positional encoding. The normalisation bounds
|s_ij| <= sqrt(D), which makes the threshold meaningful. The cache holds normalised keys.

Packed or padded batches: the op keeps a key only if it is a real token of the query's document (the op's
``segment_ids``), so it takes no softmax mass and adds nothing to c_ij; the layer only passes the ids on.

Option ``tra_dense_heads = n``: the first n heads of each layer keep every causal key (threshold -inf:
c_ij = i - j + 1, a data-dependent ALiBi), the other heads are TRA as above. Text needs some heads that
read recent tokens whatever their content; the threshold can only keep keys by content.

Option ``tra_local_window = w``: the thresholded heads always keep the w most recent keys (the query's own
included), whatever their score; they are counted in c_ij like every kept key, so the count stays bounded by
w plus the relevant keys. Option ``tra_dense_window = w``: the dense heads keep only the w most recent keys, a
window that does not grow with the length (docs/op_contract.md, section 8).

Option ``tra_threshold_warmup = W`` (training only): the threshold of the training forwards rises in stages
from threshold - sqrt(D) (every key kept) to the threshold over the first W steps (layers/tra_warmup.py).

Option ``tra_keep_surrogate = tau`` (training only): the thresholded heads' backward lets gradient reach keys
near the threshold (a sigmoid straight-through estimator for the keep decision, ops/tra/surrogate.py); the
forward values stay exact TRA, and evaluation, generation and checkpoints are the exact op.

Option ``tra_learned_temperature``: s_ij = t_h q_i . k_j / sqrt(D) with a learned t_h = exp(w_h) > 0 per
head, initialised to 1 (so a new model computes exactly the above). It lifts the bound to t_h sqrt(D),
letting attention sharpen beyond what the distance penalty g_i c_ij allows. With threshold 0 the kept
set does not depend on t_h (t_h s > 0 iff s > 0); with another threshold, keys are kept iff t_h s > it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.tra import IMPLS, threshold_relative_attention
from .base import Attention
from .norms import rms_normalize
from .tra_warmup import warmup_threshold


class TRAAttention(Attention):
    """The canonical TRA layer: query-position gate, threshold from ModelConfig.tra_threshold."""

    has_gate = True
    has_threshold = True  # a finite threshold (ModelConfig.tra_threshold_warmup can lower it in training)

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        if config.tra_impl not in IMPLS:
            raise ValueError(f"ModelConfig.tra_impl = {config.tra_impl!r}; expected one of {IMPLS}")

    def __init__(self, config):
        super().__init__(config)
        self.eps = config.norm_eps
        self.threshold = config.tra_threshold
        self.threshold_warmup = config.tra_threshold_warmup
        self.training_threshold: float | None = None  # set by on_train_step while the warm-up lasts
        self.impl = config.tra_impl
        self.dense_heads = config.tra_dense_heads
        self.local_window = config.tra_local_window
        self.dense_window = config.tra_dense_window
        self.keep_surrogate = config.tra_keep_surrogate
        if self.has_gate:
            self.gate_proj = nn.Linear(config.d_model, config.n_heads, bias=True)
        self.log_temperature = nn.Parameter(torch.zeros(config.n_heads)) if config.tra_learned_temperature else None

    def post_init(self, config):
        if self.has_gate:
            nn.init.constant_(self.gate_proj.bias, config.gate_bias_init)
        if self.log_temperature is not None:
            nn.init.zeros_(self.log_temperature)

    def on_train_step(self, step: int) -> None:
        """The threshold warm-up: the training forwards of optimizer step ``step`` use its staged threshold."""
        warming = step < self.threshold_warmup
        self.training_threshold = (
            warmup_threshold(step, self.threshold_warmup, self.threshold, self.head_dim) if warming else None
        )

    def current_threshold(self) -> float:
        """The warm-up's threshold in a training forward during the warm-up, else the exact one."""
        if self.training and self.training_threshold is not None:
            return self.training_threshold
        return self.threshold

    def normalize(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RMS-normalised q (times the learned temperature, if any) and k, per head."""
        q, k = rms_normalize(q, self.eps), rms_normalize(k, self.eps)
        if self.log_temperature is not None:
            q = q * self.log_temperature.exp().to(q.dtype)[:, None, None]
        return q, k

    def log_gate(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, S) log forget gate, in fp32."""
        return F.logsigmoid(self.gate_proj(x).float()).transpose(1, 2)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        q, k = self.normalize(q, k)
        k, v, _ = self.with_cache(cache, k, v)
        return self.by_heads(q, k, v, self.log_gate(x), segment_ids)

    def by_heads(self, q, k, v, log_gate, segment_ids=None) -> torch.Tensor:
        """``op`` on every head, with no threshold on the first ``dense_heads`` of them. ``segment_ids`` (B, Sk):
        the keys' documents (-1: padding), for every head alike."""
        n, threshold, local = self.dense_heads, self.current_threshold(), self.local_window
        # Only a packed or padded batch passes segment ids: any other call is the op's call as it always was.
        documents = {} if segment_ids is None else {"segment_ids": segment_ids}
        if not n:
            return self.op(q, k, v, log_gate, threshold, local_window=local, **documents)
        # The first n heads keep every causal key (in their window, if any); the others are exact TRA with the
        # layer's threshold (and local window).
        dense = self.op(
            q[:, :n], k[:, :n], v[:, :n], log_gate[:, :n], float("-inf"), sliding_window=self.dense_window, **documents
        )
        sparse = self.op(q[:, n:], k[:, n:], v[:, n:], log_gate[:, n:], threshold, local_window=local, **documents)
        return torch.cat([dense, sparse], dim=1)

    def op(
        self, q, k, v, log_gate, threshold: float, local_window: int = 0, sliding_window: int = 0, **documents
    ) -> torch.Tensor:
        """The TRA op on these heads, with the configured implementation (the materialised one when the
        logits are dropped or the keep decision is relaxed: training with attention_dropout or
        tra_keep_surrogate). ``documents``: ``segment_ids`` of a packed or padded batch, or nothing."""
        # The gate is a logsigmoid, <= 0 by construction: no value check (a host sync) on the hot path.
        return threshold_relative_attention(
            q,
            k,
            v,
            log_gate,
            threshold=threshold,
            impl=self.impl,
            logit_dropout=self.logit_dropout(),
            local_window=local_window,
            sliding_window=sliding_window,
            keep_surrogate=self.surrogate_temperature(threshold),
            validate=False,
            **documents,
        )

    def surrogate_temperature(self, threshold: float) -> float:
        """tra_keep_surrogate for a training forward of thresholded heads, else 0 (the exact op): dense heads
        keep every key, so there is no keep decision to relax."""
        return self.keep_surrogate if self.training and threshold != float("-inf") else 0.0
