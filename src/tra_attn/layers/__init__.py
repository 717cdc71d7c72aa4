"""Attention layers, one module per kind, selected by ModelConfig.attention through the registry.

The order below is the order of tables and plots: TRA, its ablations, then the baselines.
"""

from .alibi import ALiBiAttention
from .base import Attention
from .cache import KVCache, LayerCache
from .cope import CoPEAttention
from .fox import FoXAttention
from .nope import NoPEAttention
from .registry import (
    ATTENTION_KINDS,
    AttentionKind,
    attention_kind,
    check_model_config,
    register_attention,
    unregister_attention,
)
from .rope import RoPEAttention
from .tra import TRAAttention
from .tra_ablations import TRAKeyGateAttention, TRANoDistanceAttention, TRANoThresholdAttention

register_attention(AttentionKind("tra", TRAAttention, "TRA", "#d62728"))
register_attention(
    AttentionKind("tra_keygate", TRAKeyGateAttention, "TRA, gate at key", "#ff9896", materializes_scores=True)
)
register_attention(AttentionKind("tra_nothreshold", TRANoThresholdAttention, "TRA, no threshold", "#e377c2"))
register_attention(AttentionKind("tra_nodistance", TRANoDistanceAttention, "TRA, no distance", "#8c564b"))
register_attention(AttentionKind("nope", NoPEAttention, "NoPE", "#7f7f7f"))
register_attention(AttentionKind("rope", RoPEAttention, "RoPE", "#1f77b4"))
register_attention(AttentionKind("alibi", ALiBiAttention, "ALiBi", "#2ca02c", materializes_scores=True))
register_attention(AttentionKind("fox", FoXAttention, "FoX", "#ff7f0e", materializes_scores=True))
register_attention(AttentionKind("cope", CoPEAttention, "CoPE", "#9467bd", materializes_scores=True))

__all__ = [
    "ATTENTION_KINDS",
    "Attention",
    "AttentionKind",
    "KVCache",
    "LayerCache",
    "attention_kind",
    "check_model_config",
    "register_attention",
    "unregister_attention",
]
