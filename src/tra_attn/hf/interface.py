"""TRA inside Hugging Face's own model classes: ``attn_implementation="tra"`` for Llama, Qwen3 and any class that
runs its attention through transformers' attention interface (``_supports_attention_backend``).

``add_tra(model)`` attaches TRA's per-query forget gate to each attention module with a forward pre-hook that hands
the module its input hidden state (the mechanism, shared with the other kinds of ``add_attention``: ``attach.py``);
the settings are in ``config.tra``, and ``load_tra`` rebuilds the model from a saved folder.

In the attention function, q and k are RMS-normalised per head (TRA's scores are cosines times sqrt(D); Qwen3's
learned q_norm and k_norm come first, Llama has none), grouped-query keys are repeated, and the op runs with the
keys' padding and, in a sliding-window layer (Mistral's, Gemma 2 and 3's), the layer's window. With
``rope="remove"`` the model's rotary embedding is made the identity, so positions come from TRA alone;
``rope="keep"`` runs TRA on the rotated q and k the model gives.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from ..layers.norms import rms_normalize
from ..layers.tra import TRAOptions
from ..ops.tra import threshold_relative_attention
from .attach import (
    ROPE_CHOICES,
    Kind,
    attention_modules,
    check_model,
    check_rope,
    checked_options,
    convert,
    gate_logits,
    keep_hidden,
    load_weights,
    register,
    repeat_groups,
    saved_settings,
    trim_to_mask,
)

NAME = "tra"
KEY = "tra"  # config.tra: the settings, as add_tra has always written them
SETTINGS = ("threshold", "local_window", "keep_surrogate", "gate_bias_init", "rope")

__all__ = [
    "KEY", "KIND", "NAME", "ROPE_CHOICES", "SETTINGS", "add_tra", "attention_forward", "attention_modules", "load_tra",
]  # fmt: skip


def attention_forward(module: nn.Module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function contract: q (B, H, Sq, D), k and v (B, Hkv, Sk, D), the padding mask of
    ``attach.padding_mask_function`` (B, Sk or fewer: a static cache's filled slots) or None -> ((B, Sq, H, D), None).
    The queries are the last Sq of the keys, as in every cache but a static one's unfilled tail, which is trimmed."""
    hidden = module.__dict__.pop("_gate_input", None)
    if hidden is None or not hasattr(module, "forget_gate"):
        raise ValueError(
            f"attn_implementation='tra' on {type(module).__name__} without TRA's gate; expected a model prepared by "
            "tra_attn.hf.add_tra(model) (or loaded by tra_attn.hf.load_tra(folder))"
        )
    settings = module.attention_settings
    key, value, attention_mask = trim_to_mask(key, value, attention_mask)
    key, value = repeat_groups(query, key, value)
    eps = getattr(module.config, "rms_norm_eps", 1e-6)
    q, k = rms_normalize(query, eps), rms_normalize(key, eps)
    log_gate = F.logsigmoid(gate_logits(module, hidden)).transpose(1, 2)
    out = threshold_relative_attention(
        q,
        k,
        value,
        log_gate,
        threshold=settings["threshold"],
        local_window=settings["local_window"],
        keep_surrogate=settings["keep_surrogate"] if module.training else 0.0,
        sliding_window=kwargs.get("sliding_window") or 0,  # a sliding layer's (the keys are its cache's last ones)
        key_padding_mask=attention_mask,
    )
    return out.transpose(1, 2).contiguous(), None


register(NAME, attention_forward, KEY, "TRA", sliding=True)


def checked_settings(
    caller: str, *, threshold: float = 0.0, local_window: int = 0, keep_surrogate: float = 0.0,
    gate_bias_init: float = 0.0, rope: str = "keep",
) -> dict:  # fmt: skip
    """TRA's settings as ``config.tra`` holds them, checked as a model's TRA options are (``TRAOptions``), or a
    ValueError naming ``caller`` and the bad one."""
    check_rope(rope, caller)
    settings = {"threshold": threshold, "local_window": local_window, "keep_surrogate": keep_surrogate,
                "gate_bias_init": gate_bias_init}  # fmt: skip
    return {**checked_options(TRAOptions, caller, settings), "rope": rope}


def add_tra(
    model, *, threshold: float = 0.0, local_window: int = 0, keep_surrogate: float = 0.0, gate_bias_init: float = 0.0,
    rope: str = "keep",
):  # fmt: skip
    """Give a Hugging Face model TRA attention in place (and return it): a forget gate per attention module, the
    settings in ``config.tra``, ``attn_implementation="tra"``. ``rope``: "keep" (TRA on the rotated q and k) or
    "remove" (no rotation: TRA's own positions). Fresh gates; load trained ones with ``load_tra``."""
    modules = check_model(model, "add_tra", sliding=True)
    settings = checked_settings("add_tra", threshold=threshold, local_window=local_window,
                                keep_surrogate=keep_surrogate, gate_bias_init=gate_bias_init, rope=rope)  # fmt: skip
    return convert(model, modules, implementation=NAME, key=KEY, settings=settings, gate_hook=keep_hidden)


KIND = Kind("tra", NAME, KEY, SETTINGS, checked_settings, keep_hidden)


def load_tra(folder, model_class=None, **kwargs):
    """A model saved after ``add_tra`` (``save_pretrained``), its gates included: the class from the folder's
    config (``model_class``: e.g. ``AutoModelForCausalLM``, the default), TRA added with the saved settings, then
    every weight loaded (none missing but tied ones, none unexpected)."""
    from transformers import AutoModelForCausalLM

    config, settings = saved_settings(folder, KEY, SETTINGS)
    if settings is None:
        raise ValueError(f"load_tra: {folder} holds no model of add_tra (its config has no tra settings {SETTINGS})")
    model = (model_class or AutoModelForCausalLM).from_config(config, **kwargs)
    add_tra(model, **settings)
    return load_weights(model, folder, "load_tra")
