"""threshold-relative-attention: the reference library for Threshold Relative Attention (arXiv 2503.23174)."""

from .layers import ATTENTION_KINDS, AttentionKind, KVCache, register_attention
from .models import ModelConfig, TransformerLM
from .ops.tra import threshold_relative_attention

__all__ = [
    "ATTENTION_KINDS",
    "AttentionKind",
    "KVCache",
    "ModelConfig",
    "TransformerLM",
    "register_attention",
    "threshold_relative_attention",
]
__version__ = "0.2.0"
