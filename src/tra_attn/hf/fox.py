"""FoX (forgetting attention, Lin et al., ICLR 2025) inside transformers' own classes: ``attn_implementation=
"tra_attn.fox"``, through the mechanism of ``attach.py`` (``add_attention(model, kind="fox", rope=...)``).

    out_i = sum_{j <= i} softmax_j(scaling * q_i . k_j + sum_{l=j+1..i} log f_l) v_j,   f_l = sigmoid(w_h . x_l + b_h)

The library's op (``ops/fox.py``) on the q, k and v the model gives, at the model's own ``scaling``: the model's
softmax attention plus the forget bias (no QK norm: the basic FoX layer, ``layers/fox.py``). The gate is attached per
attention module as TRA's is (``forget_gate``), but FoX's is read at every key position, and a decoding step has the
hidden state of its new tokens only. So the gates of past keys live in the model's own cache: the pre-hook hands the
module a view of its cache whose ``update`` stores each new key's log gates as extra channels of its values (one per
query head of the kv head), and the attention function splits them off again. Whatever the cache does to its values
(a static cache's slots, beam search's reordering, cropping) it does to the gates. They are stored in the values'
dtype, and a forward without a cache rounds them the same way, so decoding equals the full forward in every dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.fox import FoXOptions
from ..ops.fox import forgetting_attention
from .attach import (
    Kind,
    check_rope,
    checked_options,
    gate_logits,
    hidden_of,
    register,
    repeat_groups,
    segments_of,
    trim_to_mask,
)

NAME = "tra_attn.fox"
KEY = "fox_attention"
SETTINGS = ("gate_bias_init", "rope")
CACHE_ARGUMENTS = ("cache", "past_key_values")  # the attention module's cache argument (renamed in transformers 5)


def log_gates(module: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """(B, S, H) log forget gates of ``hidden`` (B, S, hidden), in fp32 at least."""
    return F.logsigmoid(gate_logits(module, hidden))


class GatesInValues:
    """One attention module's view of its cache: ``update`` stores the new keys' log gates (B, S, H) after the values'
    channels, (B, Hkv, S, D + H / Hkv); everything else is the cache's own."""

    def __init__(self, cache, gates: torch.Tensor):
        self._cache, self._gates = cache, gates

    def update(self, key_states, value_states, *args, **kwargs):
        b, hkv, s, _ = value_states.shape
        gates = self._gates.reshape(b, s, hkv, -1).transpose(1, 2).to(value_states.dtype)
        return self._cache.update(key_states, torch.cat([value_states, gates], dim=-1), *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._cache, name)


def gate_hook(module: nn.Module, args, kwargs):
    """Forward pre-hook: the input hidden state for the gate; with a cache, the cache seen through ``GatesInValues``."""
    hidden = hidden_of(args, kwargs)
    module._gate_input = hidden
    for name in CACHE_ARGUMENTS:
        if kwargs.get(name) is not None:
            module._gates_in_values = True
            return args, {**kwargs, name: GatesInValues(kwargs[name], log_gates(module, hidden))}
    return None


def attention_forward(module: nn.Module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function contract (as ``interface.attention_forward``): q (B, H, Sq, D), k and v
    (B, Hkv, Sk, D), plus the gate channels when the module's cache holds them -> ((B, Sq, H, D), None)."""
    hidden = module.__dict__.pop("_gate_input", None)
    stored = module.__dict__.pop("_gates_in_values", False)
    if hidden is None or not hasattr(module, "forget_gate"):
        raise ValueError(
            f"attn_implementation={NAME!r} on {type(module).__name__} without FoX's gate; expected a model prepared by "
            "tra_attn.hf.add_attention(model, kind='fox', rope=...) (or loaded by tra_attn.hf.load_attention(folder))"
        )
    b, heads = query.shape[:2]
    if stored:
        per_kv = heads // key.shape[1]
        value, gates = value[..., :-per_kv], value[..., -per_kv:]  # (B, Hkv, Sk, H / Hkv)
        log_fgate = gates.transpose(2, 3).reshape(b, heads, -1)
    else:  # no cache: the keys are the queries' own tokens
        log_fgate = log_gates(module, hidden).to(value.dtype).transpose(1, 2)
    key, value, attention_mask = trim_to_mask(key, value, attention_mask)
    log_fgate = log_fgate[..., : key.shape[2]]
    key, value = repeat_groups(query, key, value)
    out = forgetting_attention(query, key, value, log_fgate, scale=scaling, segment_ids=segments_of(attention_mask))
    return out.transpose(1, 2).contiguous(), None


register(NAME, attention_forward, KEY, "FoX")


def checked_settings(caller: str, *, gate_bias_init: float = 0.0, rope: str = "keep") -> dict:
    """FoX's settings as ``config.fox_attention`` holds them, checked as a model's FoX options are (``FoXOptions``),
    or a ValueError naming ``caller``."""
    check_rope(rope, caller)
    return {**checked_options(FoXOptions, caller, {"gate_bias_init": gate_bias_init}), "rope": rope}


KIND = Kind("fox", NAME, KEY, SETTINGS, checked_settings, gate_hook)
