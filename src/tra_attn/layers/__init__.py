"""Attention layers, one module per kind, selected by ModelConfig.attention through the registry.

The order below is the order of ``ATTENTION_KINDS``: TRA, its ablations, then the baselines.
"""

from .alibi import ALiBiAttention
from .base import Attention
from .cache import KVCache, LayerCache
from .cope import CoPEAttention, CoPEOptions
from .fox import FoXAttention, FoXOptions
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
from .tra import TRAAttention, TRAOptions
from .tra_ablations import TRAKeyGateAttention, TRANoDistanceAttention, TRANoThresholdAttention

register_attention(AttentionKind("tra", TRAAttention))
register_attention(AttentionKind("tra_keygate", TRAKeyGateAttention, materializes_scores=True))
register_attention(AttentionKind("tra_nothreshold", TRANoThresholdAttention))
register_attention(AttentionKind("tra_nodistance", TRANoDistanceAttention))
register_attention(AttentionKind("nope", NoPEAttention))
register_attention(AttentionKind("rope", RoPEAttention))
register_attention(AttentionKind("alibi", ALiBiAttention, materializes_scores=True))
register_attention(AttentionKind("fox", FoXAttention, materializes_scores=True))
register_attention(AttentionKind("cope", CoPEAttention, materializes_scores=True))

__all__ = [
    "ATTENTION_KINDS",
    "ALiBiAttention",
    "Attention",
    "AttentionKind",
    "CoPEAttention",
    "CoPEOptions",
    "FoXAttention",
    "FoXOptions",
    "KVCache",
    "KindOptions",
    "LayerCache",
    "NoOptions",
    "NoPEAttention",
    "RoPEAttention",
    "RoPEOptions",
    "TRAAttention",
    "TRAKeyGateAttention",
    "TRANoDistanceAttention",
    "TRANoThresholdAttention",
    "TRAOptions",
    "attention_kind",
    "check_model_config",
    "option",
    "register_attention",
    "unregister_attention",
]
