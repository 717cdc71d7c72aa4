"""Attention layers, one module per kind, selected by ModelConfig.attention through this registry.

Adding a kind: one file with an ``Attention`` subclass and one line below.
"""

from .alibi import ALiBiAttention
from .base import Attention
from .cache import KVCache, LayerCache
from .cope import CoPEAttention
from .fox import FoXAttention
from .nope import NoPEAttention
from .rope import RoPEAttention
from .tra import TRAAttention
from .tra_ablations import TRAKeyGateAttention, TRANoDistanceAttention, TRANoThresholdAttention

ATTENTION_LAYERS: dict[str, type[Attention]] = {
    "tra": TRAAttention,
    "tra_keygate": TRAKeyGateAttention,
    "tra_nothreshold": TRANoThresholdAttention,
    "tra_nodistance": TRANoDistanceAttention,
    "nope": NoPEAttention,
    "rope": RoPEAttention,
    "alibi": ALiBiAttention,
    "fox": FoXAttention,
    "cope": CoPEAttention,
}

__all__ = ["ATTENTION_LAYERS", "Attention", "KVCache", "LayerCache"]
