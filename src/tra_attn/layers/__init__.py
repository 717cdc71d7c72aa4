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
from .fox_pro import FoXProAttention, FoXProOptions
from .gated import GatedAttention, GatedOptions
from .kerple import KERPLEAttention, KERPLEOptions
from .nope import NoPEAttention
from .options import KindOptions, NoOptions, option
from .path import PaTHAttention, PaTHFoXAttention, PaTHFoXOptions, PaTHOptions
from .registry import (
    ATTENTION_KINDS,
    AttentionKind,
    attention_kind,
    check_model_config,
    register_attention,
    unregister_attention,
)
from .rope import RoPEAttention, RoPEOptions
from .selective import SelectiveAttention
from .softpick import SoftpickAttention, SoftpickOptions
from .ssmax import SSMaxAttention, SSMaxOptions
from .stickbreaking import StickBreakingAttention, StickBreakingOptions
from .t5 import T5Attention, T5Options
from .tra import TRAAttention, TRAOptions
from .wall import WallAttention, WallOptions

register_attention(AttentionKind("tra", TRAAttention))
register_attention(AttentionKind("nope", NoPEAttention))
register_attention(AttentionKind("rope", RoPEAttention))
register_attention(AttentionKind("alibi", ALiBiAttention, materializes_scores=True))
register_attention(AttentionKind("fox", FoXAttention, materializes_scores=True))
register_attention(AttentionKind("fox_pro", FoXProAttention, materializes_scores=True))
register_attention(AttentionKind("cope", CoPEAttention, materializes_scores=True))
register_attention(AttentionKind("t5", T5Attention))
register_attention(AttentionKind("fire", FIREAttention))
register_attention(AttentionKind("kerple", KERPLEAttention))
register_attention(AttentionKind("stickbreaking", StickBreakingAttention))
register_attention(AttentionKind("path", PaTHAttention, materializes_scores=True))
register_attention(AttentionKind("path_fox", PaTHFoXAttention, materializes_scores=True))
register_attention(AttentionKind("ssmax", SSMaxAttention))
register_attention(AttentionKind("asentmax", ASEntmaxAttention))
register_attention(AttentionKind("softpick", SoftpickAttention))
register_attention(AttentionKind("gated", GatedAttention))
register_attention(AttentionKind("selective", SelectiveAttention, materializes_scores=True))
register_attention(AttentionKind("wall", WallAttention))

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
    "FoXProAttention",
    "FoXProOptions",
    "GatedAttention",
    "GatedOptions",
    "KERPLEAttention",
    "KERPLEOptions",
    "KVCache",
    "KindOptions",
    "LayerCache",
    "NoOptions",
    "NoPEAttention",
    "PaTHAttention",
    "PaTHFoXAttention",
    "PaTHFoXOptions",
    "PaTHOptions",
    "RoPEAttention",
    "RoPEOptions",
    "SelectiveAttention",
    "SoftpickAttention",
    "SoftpickOptions",
    "SSMaxAttention",
    "SSMaxOptions",
    "StickBreakingAttention",
    "StickBreakingOptions",
    "T5Attention",
    "T5Options",
    "TRAAttention",
    "TRAOptions",
    "WallAttention",
    "WallOptions",
    "attention_kind",
    "check_model_config",
    "option",
    "register_attention",
    "unregister_attention",
]
