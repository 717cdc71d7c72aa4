"""Multi-head attention skeleton shared by every attention kind: projections, heads, KV cache."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import torch
from torch import nn

from .cache import LayerCache

if TYPE_CHECKING:  # type hints only: the model config is data the layers read
    from ..models.config import ModelConfig

# ModelConfig fields that need a threshold
TRA_THRESHOLD_OPTIONS = (
    "tra_dense_heads",
    "tra_threshold_warmup",
    "tra_local_window",
    "tra_dense_window",
    "tra_keep_surrogate",
)


class Attention(nn.Module):
    """Bias-free Q/K/V projections, an output projection with bias, and an ``attend`` hook.

    Subclasses implement ``attend(x, q, k, v, cache, segment_ids)`` on per-head tensors (B, H, S, Dh) of the
    new positions; with a cache they append their keys/values to it and attend over all of them.
    ``segment_ids`` (B, Sk), int32, describes a packed or padded batch: the document of every key (cached
    ones first), -1 on padding; the queries are the last S of them. A query attends only to real keys of its
    own document, and positions count from that document's start (docs/padding_and_packing.md). None: one
    document per row, no padding (the fast path). A kind whose ``attend(x, q, k, v, cache)`` takes no
    ``segment_ids`` still runs every batch without them, and refuses packed or padded ones clearly.
    """

    has_threshold = False  # whether keys are kept by a finite TRA threshold (which TRA_THRESHOLD_OPTIONS act on)

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        """Refuse a config this kind cannot honour, with the field, its value and what was expected.

        ModelConfig checks its fields on its own; the checks that need the kind live here (subclasses add
        theirs and call this one), run by ``layers.registry.check_model_config``.
        """
        for name in TRA_THRESHOLD_OPTIONS:
            value = getattr(config, name)
            if value and not cls.has_threshold:
                raise ValueError(
                    f"ModelConfig.{name} = {value!r}; expected 0 for attention = {config.attention!r}, "
                    "which has no TRA threshold"
                )

    def __init__(self, config: ModelConfig):
        super().__init__()
        d = config.d_model
        self.n_heads = config.n_heads
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=True)
        self.attention_dropout = config.attention_dropout
        self.takes_segment_ids = "segment_ids" in inspect.signature(self.attend).parameters

    def logit_dropout(self) -> float:
        """Dropout probability on the pre-softmax logits: ModelConfig.attention_dropout in training, else 0."""
        return self.attention_dropout if self.training else 0.0

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(
        self, x: torch.Tensor, cache: LayerCache | None = None, segment_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        q, k, v = (self.split_heads(proj(x)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        if segment_ids is None:
            out = self.attend(x, q, k, v, cache)
        elif self.takes_segment_ids:
            out = self.attend(x, q, k, v, cache, segment_ids)
        else:
            raise ValueError(
                f"{type(self).__name__}.attend(x, q, k, v, cache) takes no segment_ids; expected "
                "attend(x, q, k, v, cache, segment_ids=None) for a packed or padded batch (attention_mask with "
                "zeros, cu_seqlens or segment_ids)"
            )
        b, _, s, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))

    def attend(self, x, q, k, v, cache: LayerCache | None, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def past_length(cache: LayerCache | None) -> int:
        return 0 if cache is None else cache.length

    @staticmethod
    def with_cache(cache: LayerCache | None, k, v, **extras):
        """All keys, values and extras: the cached ones followed by the new ones."""
        if cache is None:
            return k, v, extras
        return cache.update(k, v, **extras)

    def post_init(self, config: ModelConfig) -> None:
        """Initialise parameters that the model's generic initialisation should not set."""

    def on_train_step(self, step: int) -> None:
        """Called (through ``TransformerLM.set_train_step``) before the training forwards of optimizer step
        ``step``; nothing by default (TRA's threshold warm-up uses it)."""
