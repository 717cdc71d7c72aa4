"""Attention layers, one module per kind, selected by ModelConfig.attention through the registry.

The order below is the order of ``ATTENTION_KINDS``: TRA (its ablations are options of it: ``gate``, ``threshold``
-inf, ``distance``), then the baselines.
"""

from .alibi import ALiBiAttention, ALiBiOptions
from .asentmax import ASEntmaxAttention, ASEntmaxOptions
from .base import Attention
from .cache import KVCache, LayerCache
from .cope import CoPEAttention, CoPEOptions
from .fire import FIREAttention, FIREOptions
from .fox import FoXAttention, FoXOptions
from .kerple import KERPLEAttention, KERPLEOptions
from .nope import NoPEAttention
from .options import KindOptions, NoOptions, option
from .registry import (
    ATTENTION_KINDS,
    AttentionKind,
    attention_kind,
    check_model_config,
    register_attention,
    unregister_attention,
)
from .rope import RoPEAttention, RoPEOptions
from .ssmax import SSMaxAttention, SSMaxOptions
from .stickbreaking import StickBreakingAttention, StickBreakingOptions
from .t5 import T5Attention, T5Options
from .tra import TRAAttention, TRAOptions

register_attention(AttentionKind("tra", TRAAttention))
register_attention(AttentionKind("nope", NoPEAttention))
register_attention(AttentionKind("rope", RoPEAttention))
register_attention(AttentionKind("alibi", ALiBiAttention, materializes_scores=True))
register_attention(AttentionKind("fox", FoXAttention, materializes_scores=True))
register_attention(AttentionKind("cope", CoPEAttention, materializes_scores=True))
register_attention(AttentionKind("t5", T5Attention))
register_attention(AttentionKind("fire", FIREAttention))
register_attention(AttentionKind("kerple", KERPLEAttention))
register_attention(AttentionKind("stickbreaking", StickBreakingAttention))
register_attention(AttentionKind("ssmax", SSMaxAttention))
register_attention(AttentionKind("asentmax", ASEntmaxAttention))

__all__ = [
    "ATTENTION_KINDS",
    "ALiBiAttention",
    "ALiBiOptions",
    "ASEntmaxAttention",
    "ASEntmaxOptions",
    "Attention",
    "AttentionKind",
    "CoPEAttention",
    "CoPEOptions",
    "FIREAttention",
    "FIREOptions",
    "FoXAttention",
    "FoXOptions",
    "KERPLEAttention",
    "KERPLEOptions",
    "KVCache",
    "KindOptions",
    "LayerCache",
    "NoOptions",
    "NoPEAttention",
    "RoPEAttention",
    "RoPEOptions",
    "SSMaxAttention",
    "SSMaxOptions",
    "StickBreakingAttention",
    "StickBreakingOptions",
    "T5Attention",
    "T5Options",
    "TRAAttention",
    "TRAOptions",
    "attention_kind",
    "check_model_config",
    "option",
    "register_attention",
    "unregister_attention",
]
