"""threshold-relative-attention: the reference library for Threshold Relative Attention (arXiv 2503.23174)."""

from .hf_hook import install as _install_hf_hook
from .layers import ATTENTION_KINDS, AttentionKind, KindOptions, KVCache, register_attention
from .models import ModelConfig, TransformerLM
from .ops.tra import threshold_relative_attention

_install_hf_hook()

__all__ = [
    "ATTENTION_KINDS",
    "AttentionKind",
    "KVCache",
    "KindOptions",
    "ModelConfig",
    "TransformerLM",
    "register_attention",
    "threshold_relative_attention",
]
__version__ = "0.3.0"
