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

Option ``dense_heads = n``: the first n heads of each layer keep every causal key (threshold -inf:
c_ij = i - j + 1, a data-dependent ALiBi), the other heads are TRA as above. Text needs some heads that
read recent tokens whatever their content; the threshold can only keep keys by content.

Option ``local_window = w``: the thresholded heads always keep the w most recent keys (the query's own
included), whatever their score; they are counted in c_ij like every kept key, so the count stays bounded by
w plus the relevant keys. Option ``dense_window = w``: the dense heads keep only the w most recent keys, a
window that does not grow with the length (docs/op_contract.md, section 8).

Option ``threshold_warmup = W`` (training only): the threshold of the training forwards rises in stages
from threshold - sqrt(D) (every key kept) to the threshold over the first W steps (layers/tra_warmup.py).

Option ``keep_surrogate = tau`` (training only): the thresholded heads' backward lets gradient reach keys
near the threshold (a sigmoid straight-through estimator for the keep decision, ops/tra/surrogate.py); the
forward values stay exact TRA, and evaluation, generation and checkpoints are the exact op.

Option ``learned_temperature``: s_ij = t_h q_i . k_j / sqrt(D) with a learned t_h = exp(w_h) > 0 per
head, initialised to 1 (so a new model computes exactly the above). It lifts the bound to t_h sqrt(D),
letting attention sharpen beyond what the distance penalty g_i c_ij allows. With threshold 0 the kept
set does not depend on t_h (t_h s > 0 iff s > 0); with another threshold, keys are kept iff t_h s > it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.masks import relative_distance
from ..ops.tra import IMPLS, threshold_relative_attention
from ..ops.varlen import segment_mask
from .base import Attention
from .norms import rms_normalize
from .options import KindOptions, finite, non_negative, non_negative_int, not_nan, one_of, option
from .tra_warmup import warmup_threshold


@dataclass(frozen=True)
class TRAOptions(KindOptions):
    """TRA's options (flags ``--tra-...``); the ablations declare the subsets they honour."""

    prefix = "tra"
    threshold: float = option(0.0, "key j is kept iff its score exceeds this", not_nan)
    impl: str = option("auto", "op implementation: auto, naive, chunked, triton", one_of(*IMPLS))
    learned_temperature: bool = option(False, "a learned per-head factor on the scores, initialised to 1 (exact TRA)")
    dense_heads: int = option(
        0, "the first N heads of each layer keep every causal key (no threshold)", non_negative_int
    )
    local_window: int = option(
        0, "the w most recent keys are always kept (and counted) in the thresholded heads; 0: off", non_negative_int
    )
    dense_window: int = option(
        0, "the dense heads (dense_heads) keep only the w most recent keys; 0: every causal key", non_negative_int
    )
    threshold_warmup: int = option(
        0,
        "training steps over which the threshold rises from threshold - sqrt(head_dim) (every key kept) to the "
        "threshold; validation, evaluation and checkpoints always use the threshold (0: off)",
        non_negative_int,
    )
    keep_surrogate: float = option(
        0.0,
        "training-time temperature of a sigmoid straight-through gradient for the keep decision; the forward "
        "pass stays exact (0: off)",
        non_negative,
    )
    gate_bias_init: float = option(0.0, "initial bias of the forget gate")
    threshold_shift: float = option(
        0.0,
        "training only: training forwards keep keys scoring above threshold + threshold_shift (> 0: kept keys clear "
        "a margin; < 0: keys just below the threshold are kept, and cost loss, in training); evaluation is exact",
        finite,
    )
    keep_penalty: float = option(
        0.0,
        "training only: weight of a hinge penalty on the scores of keys the local window does not keep, pushing them "
        "keep_margin below the threshold (keys the task needs are held above by its loss); 0: off",
        non_negative,
    )
    keep_margin: float = option(0.5, "training only: the margin below the threshold of keep_penalty", non_negative)

    def check(self) -> None:
        if getattr(self, "dense_window", 0) and not getattr(self, "dense_heads", 0):
            raise ValueError(
                f"{self.describe('dense_window')} = {self.dense_window}; expected 0 when dense_heads = 0 (the window "
                "applies to the dense heads)"
            )


class TRAAttention(Attention):
    """The canonical TRA layer: query-position gate, the threshold and windows of its options (TRAOptions)."""

    Options = TRAOptions
    has_gate = True

    @classmethod
    def check_options(cls, options, d_model: int, n_heads: int) -> None:
        dense = getattr(options, "dense_heads", 0)
        if dense > n_heads:
            raise ValueError(f"{options.describe('dense_heads')} = {dense}; expected at most n_heads = {n_heads}")

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        # Options this kind does not declare (an ablation's missing mechanism) take TRA's defaults.
        o = TRAOptions(**self.options.to_dict())
        self.eps = self.norm_eps
        self.threshold = o.threshold
        self.threshold_warmup = o.threshold_warmup
        self.training_threshold: float | None = None  # set by on_train_step while the warm-up lasts
        self.impl = o.impl
        self.dense_heads = o.dense_heads
        self.local_window = o.local_window
        self.dense_window = o.dense_window
        self.keep_surrogate = o.keep_surrogate
        self.gate_bias_init = o.gate_bias_init
        self.threshold_shift, self.keep_penalty, self.keep_margin = o.threshold_shift, o.keep_penalty, o.keep_margin
        if self.has_gate:
            self.gate_proj = nn.Linear(d_model, n_heads, bias=True)
        self.log_temperature = nn.Parameter(torch.zeros(n_heads)) if o.learned_temperature else None
        self.post_init()

    def post_init(self):
        if self.has_gate:
            nn.init.constant_(self.gate_proj.bias, self.gate_bias_init)
        if self.log_temperature is not None:
            nn.init.zeros_(self.log_temperature)

    def on_train_step(self, step: int) -> None:
        """The threshold warm-up: the training forwards of optimizer step ``step`` use its staged threshold."""
        warming = step < self.threshold_warmup
        self.training_threshold = (
            warmup_threshold(step, self.threshold_warmup, self.threshold, self.head_dim) if warming else None
        )

    def current_threshold(self) -> float:
        """In a training forward: the warm-up's threshold while it lasts, else the threshold shifted by
        threshold_shift; in evaluation the exact one."""
        if not self.training:
            return self.threshold
        if self.training_threshold is not None:
            return self.training_threshold
        return self.threshold + self.threshold_shift

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
        self.penalise(q, k, segment_ids)
        return self.by_heads(q, k, v, self.log_gate(x), segment_ids)

    def penalise(self, q, k, segment_ids=None) -> None:
        """In training with keep_penalty: the weighted mean over the thresholded heads' allowed (query, key)
        pairs outside the local window of relu(s_ij - threshold + keep_margin), as the layer's auxiliary loss."""
        self.auxiliary_loss = None
        if not (self.training and self.keep_penalty) or self.dense_heads == q.shape[1]:
            return
        n = self.dense_heads
        scores = (q[:, n:].float() @ k[:, n:].float().transpose(-1, -2)) * self.head_dim**-0.5
        sq, sk = scores.shape[-2:]
        allowed = relative_distance(sq, sk, scores.device) >= self.local_window  # causal, outside the window
        if segment_ids is not None:
            allowed = allowed & segment_mask(segment_ids, sq)  # keys of the query's document
        hinge = torch.relu(scores - self.current_threshold() + self.keep_margin) * allowed
        self.auxiliary_loss = self.keep_penalty * hinge.sum() / allowed.expand_as(hinge).sum().clamp(min=1)

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
        """The TRA op on these heads, with the configured implementation (every implementation serves the logit
        dropout of attention_dropout and the keep surrogate, in training). The dropout's seed is drawn by the op
        from torch's generator, once per call: the training loop seeds and checkpoints that generator, so a
        resumed run drops the logits the uninterrupted one dropped. ``documents``: ``segment_ids`` of a packed or
        padded batch, or nothing."""
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
        """keep_surrogate for a training forward of thresholded heads, else 0 (the exact op): dense heads
        keep every key, so there is no keep decision to relax."""
        return self.keep_surrogate if self.training and threshold != float("-inf") else 0.0
