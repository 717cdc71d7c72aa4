"""threshold-relative-attention: the reference library for Threshold Relative Attention (arXiv 2503.23174)."""

from .config import ModelConfig
from .layers import ATTENTION_LAYERS, KVCache
from .model import TransformerLM
from .ops.tra import threshold_relative_attention

__all__ = ["ATTENTION_LAYERS", "KVCache", "ModelConfig", "TransformerLM", "threshold_relative_attention"]
__version__ = "0.1.0"
