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

The ablations (the paper's, docs/model.md) are option values of this one layer, each removing or moving one ingredient:

- ``gate = "key"``: the forget gate is taken at each kept key between j and i (FoX-style),
  logits_ij = s_ij + sum over kept l in [j, i] of g_l (``ops/tra/key_gate.py``, a materialised O(S^2) reference,
  so no ``impl`` and no ``keep_surrogate``); the keep rule, windows and documents included, is TRA's. The KV cache
  keeps every key's gate. With a constant gate it is TRA exactly.
- ``threshold = -inf``: no threshold; every causal key is kept, so c_ij = i - j + 1 and the bias is
  g_i (i - j + 1), a data-dependent ALiBi. The options that act on the threshold (dense heads, windows, warm-up,
  surrogate, shift, penalty and its margin) are refused with it.
- ``distance = False``: the threshold only, no gate and no distance term (NoPE plus selective sparsity); the
  layer has no gate projection, and refuses ``gate = "key"`` and ``gate_bias_init``.

Options that exclude each other are refused when the options are built (``TRAOptions.check``), by both names.
Saved configs that name the former kinds ``tra_keygate``, ``tra_nothreshold`` and ``tra_nodistance`` load as
these options (``models/config.py``, version 8).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.masks import relative_distance
from ..ops.tra import IMPLS, NO_AIDS, NO_DOCUMENTS, Documents, KeepRule, TrainingAids, threshold_relative_attention
from ..ops.tra.key_gate import tra_key_gate_naive
from ..ops.varlen import segment_mask
from .base import Attention
from .norms import rms_normalize
from .options import KindOptions, below_inf, finite, non_negative, non_negative_int, one_of, option
from .tra_warmup import warmup_threshold

# Options that act on the threshold's keep decision, meaningless without one (threshold -inf): -> their meaning.
THRESHOLD_OPTIONS = {
    "dense_heads": "every head already keeps every causal key",
    "local_window": "every causal key is already kept",
    "dense_window": "there are no dense heads apart from the others",
    "threshold_warmup": "there is no threshold to warm up",
    "keep_surrogate": "there is no keep decision to relax",
    "threshold_shift": "there is no threshold to shift",
    "keep_penalty": "there is no threshold to push scores below",
    "keep_margin": "there is no threshold to push scores below",
}
GATES = ("query", "key")


@dataclass(frozen=True)
class TRAOptions(KindOptions):
    """TRA's options (flags ``--tra-...``), its ablations included: ``gate = 'key'`` (the gate at each kept key),
    ``threshold = -inf`` (no threshold) and ``distance = False`` (no gate and no distance term)."""

    prefix = "tra"
    threshold: float = option(
        0.0,
        "key j is kept iff its score exceeds this; -inf: no threshold, every causal key kept (an ablation)",
        below_inf,
    )
    impl: str = option("auto", "op implementation: auto, naive, chunked, cpu (fused kernels), triton", one_of(*IMPLS))
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
    gate: str = option(
        "query",
        "where the forget gate is taken: 'query' (TRA: the query's gate times the count of kept keys) or 'key' "
        "(an ablation, FoX-style: each kept key between j and i adds its own gate; a materialised O(S^2) op)",
        one_of(*GATES),
    )
    distance: bool = option(
        True, "the distance term g_i c_ij; false: no gate and no distance, the threshold only (an ablation)"
    )

    def check(self) -> None:
        """The options that exclude each other: a ValueError naming both."""
        if self.dense_window and not self.dense_heads:
            raise ValueError(
                f"{self.describe('dense_window')} = {self.dense_window}; expected 0 when dense_heads = 0 (the window "
                "applies to the dense heads)"
            )
        if self.threshold == -math.inf:
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            for name, why in THRESHOLD_OPTIONS.items():
                if getattr(self, name) != defaults[name]:
                    self._exclude(name, defaults[name], "threshold", "-inf", why)
        if self.gate == "key":
            if self.impl != "auto":
                self._exclude("impl", "'auto'", "gate", "'key'", "the key-gate op is the materialised reference")
            if self.keep_surrogate:
                self._exclude("keep_surrogate", 0.0, "gate", "'key'", "the key-gate op has no keep surrogate")
        if not self.distance:
            if self.gate != "query":
                self._exclude("gate", "'query'", "distance", "False", "without the distance term there is no gate")
            if self.gate_bias_init:
                self._exclude("gate_bias_init", 0.0, "distance", "False", "without the distance term there is no gate")

    def _exclude(self, name: str, expected, other: str, value: str, why: str):
        raise ValueError(
            f"{self.describe(name)} = {getattr(self, name)!r} with {self.describe(other)} = {value}; expected "
            f"{name} = {expected} ({why})"
        )


@functools.lru_cache(maxsize=256)
def _cached_keep_rule(threshold: float, local_window: int, sliding_window: int) -> KeepRule:
    return KeepRule(threshold, local_window, sliding_window)


def keep_rule(threshold: float, local_window: int, sliding_window: int) -> KeepRule:
    """A checked KeepRule, built once per rule in eager mode (a layer asks for its rules in every forward, and
    decoding calls it per token); under torch.compile built directly, as dynamo traces through a cache anyway."""
    if torch.compiler.is_compiling():
        return KeepRule(threshold, local_window, sliding_window)
    return _cached_keep_rule(threshold, local_window, sliding_window)


class TRAAttention(Attention):
    """The TRA layer (its options: TRAOptions): the query-position gate, the threshold and windows of its options,
    and the ablations as option values (``gate``, ``threshold = -inf``, ``distance``)."""

    Options = TRAOptions

    @classmethod
    def check_options(cls, options, d_model: int, n_heads: int) -> None:
        if options.dense_heads > n_heads:
            raise ValueError(
                f"{options.describe('dense_heads')} = {options.dense_heads}; expected at most n_heads = {n_heads}"
            )

    @classmethod
    def materializes(cls, options) -> bool:
        """The key-gate ablation's op builds (B, H, Sq, Sk) tensors."""
        return options.gate == "key"

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.training_threshold: float | None = None  # set by on_train_step while the warm-up lasts
        if self.options.distance:
            self.gate_proj = nn.Linear(d_model, n_heads, bias=True)
        self.log_temperature = nn.Parameter(torch.zeros(n_heads)) if self.options.learned_temperature else None
        self.post_init()

    def post_init(self):
        if self.options.distance:
            nn.init.constant_(self.gate_proj.bias, self.options.gate_bias_init)
        if self.log_temperature is not None:
            nn.init.zeros_(self.log_temperature)

    def on_train_step(self, step: int) -> None:
        """The threshold warm-up: the training forwards of optimizer step ``step`` use its staged threshold."""
        o = self.options
        warming = step < o.threshold_warmup
        self.training_threshold = (
            warmup_threshold(step, o.threshold_warmup, o.threshold, self.head_dim) if warming else None
        )

    def current_threshold(self) -> float:
        """In a training forward: the warm-up's threshold while it lasts, else the threshold shifted by
        threshold_shift; in evaluation the exact one."""
        if not self.training:
            return self.options.threshold
        if self.training_threshold is not None:
            return self.training_threshold
        return self.options.threshold + self.options.threshold_shift

    def normalize(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RMS-normalised q (times the learned temperature, if any) and k, per head."""
        q, k = rms_normalize(q, self.norm_eps), rms_normalize(k, self.norm_eps)
        if self.log_temperature is not None:
            q = q * self.log_temperature.exp().to(q.dtype)[:, None, None]
        return q, k

    def log_gate(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, S) log forget gate, in fp32 (0 without the distance term)."""
        if not self.options.distance:
            b, s, _ = x.shape
            return x.new_zeros((b, self.n_heads, s), dtype=torch.float32)
        return F.logsigmoid(self.gate_proj(x).float()).transpose(1, 2)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        if self.op_normalizes(cache):  # the op's own normalisation: fused into the CPU kernels' passes
            self.auxiliary_loss = None
            return self.by_heads(q, k, v, self.log_gate(x), segment_ids, qk_norm_eps=self.norm_eps)
        q, k = self.normalize(q, k)
        if self.options.gate == "key":  # the cache keeps every key's gate
            k, v, extras = self.with_cache(cache, k, v, log_gate=self.log_gate(x))
            gate = extras["log_gate"]
        else:
            k, v, _ = self.with_cache(cache, k, v)
            gate = self.log_gate(x)
        self.penalise(q, k, segment_ids)
        return self.by_heads(q, k, v, gate, segment_ids)

    def op_normalizes(self, cache) -> bool:
        """Whether the op normalises q and k (qk_norm_eps) instead of the layer: a training forward without a cache
        whose normalised q and k nothing else reads (no learned temperature, no keep penalty, the query gate)."""
        o = self.options
        plain = self.log_temperature is None and o.gate == "query" and not o.keep_penalty
        return self.training and cache is None and plain

    def penalise(self, q, k, segment_ids=None) -> None:
        """In training with keep_penalty: the weighted mean over the thresholded heads' allowed (query, key)
        pairs outside the local window of relu(s_ij - threshold + keep_margin), as the layer's auxiliary loss."""
        self.auxiliary_loss = None
        o = self.options
        if not (self.training and o.keep_penalty) or o.dense_heads == q.shape[1]:
            return
        n = o.dense_heads
        scores = (q[:, n:].float() @ k[:, n:].float().transpose(-1, -2)) * self.head_dim**-0.5
        sq, sk = scores.shape[-2:]
        allowed = relative_distance(sq, sk, scores.device) >= o.local_window  # causal, outside the window
        if segment_ids is not None:
            allowed = allowed & segment_mask(segment_ids, sq)  # keys of the query's document
        hinge = torch.relu(scores - self.current_threshold() + o.keep_margin) * allowed
        self.auxiliary_loss = o.keep_penalty * hinge.sum() / allowed.expand_as(hinge).sum().clamp(min=1)

    def keep_rules(self) -> tuple[KeepRule, KeepRule]:
        """The keep rules of (the dense heads, the thresholded heads) in this forward: every causal key (in the
        dense window, if any), and the current threshold with the local window."""
        o = self.options
        return keep_rule(-math.inf, 0, o.dense_window), keep_rule(self.current_threshold(), o.local_window, 0)

    def by_heads(self, q, k, v, log_gate, segment_ids=None, qk_norm_eps=None) -> torch.Tensor:
        """``op`` on every head, with no threshold on the first ``dense_heads`` of them. ``segment_ids`` (B, Sk):
        the keys' documents (-1: padding), for every head alike."""
        n = self.options.dense_heads
        documents = NO_DOCUMENTS if segment_ids is None else Documents(segment_ids)
        dense, thresholded = self.keep_rules()
        if not n:
            return self.op(q, k, v, log_gate, thresholded, documents, qk_norm_eps)
        # The first n heads keep every causal key (in their window, if any); the others are exact TRA with the
        # layer's threshold (and local window).
        first = self.op(q[:, :n], k[:, :n], v[:, :n], log_gate[:, :n], dense, documents, qk_norm_eps)
        others = self.op(q[:, n:], k[:, n:], v[:, n:], log_gate[:, n:], thresholded, documents, qk_norm_eps)
        return torch.cat([first, others], dim=1)

    def op(self, q, k, v, log_gate, keep: KeepRule, documents: Documents = NO_DOCUMENTS, qk_norm_eps=None):
        """The attention of these heads under ``keep`` and ``documents``: the TRA op with the configured
        implementation (every implementation serves the logit dropout of attention_dropout and the keep surrogate,
        in training), or with ``gate = 'key'`` the key-gate op (``log_gate`` then holds every key's gate). The op
        draws the dropout's seed from torch's generator, once per call: the training loop seeds and checkpoints
        that generator, so a resumed run drops the logits the uninterrupted one dropped."""
        if self.options.gate == "key":
            aids = TrainingAids(logit_dropout=self.logit_dropout())
            scale = self.head_dim**-0.5
            return tra_key_gate_naive(q, k, v, log_gate, scale=scale, keep=keep, documents=documents, aids=aids)
        aids = NO_AIDS  # in evaluation: the exact op
        if self.training:
            surrogate = self.surrogate_temperature(keep.threshold)
            aids = TrainingAids(keep_surrogate=surrogate, logit_dropout=self.logit_dropout())
        # The gate is a logsigmoid, <= 0 by construction: no value check (a host sync) on the hot path, and a CPU
        # decoding step skips the op's checks altogether.
        return threshold_relative_attention(
            q, k, v, log_gate, impl=self.options.impl, qk_norm_eps=qk_norm_eps, validate=False, keep=keep,
            documents=documents, aids=aids,
        )  # fmt: skip

    def surrogate_temperature(self, threshold: float) -> float:
        """keep_surrogate for a training forward of thresholded heads, else 0 (the exact op): dense heads
        keep every key, so there is no keep decision to relax."""
        return self.options.keep_surrogate if self.training and threshold != -math.inf else 0.0
