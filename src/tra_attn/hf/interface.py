"""TRA inside Hugging Face's own model classes: ``attn_implementation="tra"`` for Llama, Qwen3 and any class that
runs its attention through transformers' attention interface (``_supports_attention_backend``).

transformers calls a registered attention function with the attention module and its projected (and, in those
models, rotated) q, k and v; it does not pass the hidden state, which TRA's per-query forget gate reads. So
``add_tra(model)`` attaches the gate to each attention module (``forget_gate``, a Linear(hidden, heads) initialised as
``TRAAttention`` initialises its gate: weights at the model's initializer range, bias at ``gate_bias_init``) and a
forward pre-hook that hands the module its input hidden state. A hook, not a subclass: it leaves every model
class and its checkpoints as transformers wrote them, and works on any attention module that takes
``hidden_states``. The gate is part of the model's state dict (``save_pretrained`` writes it) and the settings are
in ``config.tra`` (``load_tra`` rebuilds the model from a saved folder).

In the attention function, q and k are RMS-normalised per head (TRA's scores are cosines times sqrt(D); Qwen3's
learned q_norm and k_norm come first, Llama has none), grouped-query keys are repeated, and the op runs with the
keys' padding (the mask function registered beside it hands over the 2D padding mask: without a mask
registration transformers would drop the mask). With ``rope="remove"`` the model's rotary embedding is made the
identity, so positions come from TRA alone; ``rope="keep"`` runs TRA on the rotated q and k the model gives.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function

from ..layers.norms import rms_normalize
from ..ops.tra import threshold_relative_attention
from .modeling import safetensors_files

NAME = "tra"
ROPE_CHOICES = ("keep", "remove")
SETTINGS = ("threshold", "local_window", "keep_surrogate", "gate_bias_init", "rope")


def attention_forward(module: nn.Module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function contract: q (B, H, Sq, D), k and v (B, Hkv, Sk, D), the padding mask of
    ``padding_mask`` (B, Sk or fewer: a static cache's filled slots) or None -> ((B, Sq, H, D), None). The
    queries are the last Sq of the keys, as in every cache but a static one's unfilled tail, which is trimmed."""
    hidden = module.__dict__.pop("_gate_input", None)
    if hidden is None or not hasattr(module, "forget_gate"):
        raise ValueError(
            f"attn_implementation='tra' on {type(module).__name__} without TRA's gate; expected a model prepared by "
            "tra_attn.hf.add_tra(model) (or loaded by tra_attn.hf.load_tra(folder))"
        )
    settings = module.threshold_settings
    if attention_mask is not None and attention_mask.shape[-1] < key.shape[2]:  # a static cache's filled slots
        key, value = key[:, :, : attention_mask.shape[-1]], value[:, :, : attention_mask.shape[-1]]
    if attention_mask is not None and bool(attention_mask.all()):
        attention_mask = None
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # grouped-query attention: every query head reads its group's keys
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    eps = getattr(module.config, "rms_norm_eps", 1e-6)
    q, k = rms_normalize(query, eps), rms_normalize(key, eps)
    log_gate = F.logsigmoid(module.forget_gate(hidden).float()).transpose(1, 2)
    out = threshold_relative_attention(
        q,
        k,
        value,
        log_gate,
        threshold=settings["threshold"],
        local_window=settings["local_window"],
        keep_surrogate=settings["keep_surrogate"] if module.training else 0.0,
        key_padding_mask=attention_mask,
    )
    return out.transpose(1, 2).contiguous(), None


def padding_mask(
    batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=causal_mask_function,
    attention_mask=None, **kwargs,
):  # fmt: skip
    """The mask the attention function receives: the keys' (B, kv_length) padding (True: a token), or None when
    there is none. TRA is causal by construction; any other pattern (sliding windows, chunks) is refused."""
    if mask_function is not causal_mask_function:
        raise ValueError(
            "attn_implementation='tra': this model's layers use a mask other than causal (sliding or chunked "
            "attention); expected full causal attention"
        )
    # A static cache's slots past the queries hold no keys yet: the mask then covers the filled ones only, and the
    # attention trims the keys to it.
    used = kv_length if q_offset is None else min(kv_length, int(q_offset) + q_length)
    if attention_mask is None:
        mask = torch.ones(batch_size, used, dtype=torch.bool, device=kwargs.get("device", "cpu"))
    else:
        mask = attention_mask.bool()[:, kv_offset : kv_offset + used]
    return None if used == kv_length and bool(mask.all()) else mask


AttentionInterface.register(NAME, attention_forward)
AttentionMaskInterface.register(NAME, padding_mask)


def _keep_hidden(module: nn.Module, args, kwargs):
    """Forward pre-hook: the attention module's input hidden state, for its gate."""
    module._gate_input = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]


class _NoRotation(nn.Module):
    """A rotary embedding that rotates by nothing (cos 1, sin 0): the model's positions are TRA's alone."""

    def __init__(self, rotary: nn.Module):
        super().__init__()
        self.rotary = rotary

    def forward(self, x, position_ids):
        cos, sin = self.rotary(x, position_ids)
        return torch.ones_like(cos), torch.zeros_like(sin)


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The modules a Hugging Face decoder runs its attention interface from (q, k, v and o projections)."""
    return [m for m in model.modules() if all(hasattr(m, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj"))]


def _check_model(model) -> None:
    if not isinstance(model, PreTrainedModel) or not getattr(type(model), "_supports_attention_backend", False):
        raise ValueError(
            f"add_tra: {type(model).__name__} does not run its attention through transformers' attention interface "
            "(_supports_attention_backend); expected a model class that does, such as Llama or Qwen3"
        )
    config = model.config
    sliding = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    if sliding or "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        raise ValueError(
            f"add_tra: {type(model).__name__} has sliding-window layers; expected full causal attention in every "
            "layer (TRA's own local window is the local_window setting)"
        )


def add_tra(
    model, *, threshold: float = 0.0, local_window: int = 0, keep_surrogate: float = 0.0, gate_bias_init: float = 0.0,
    rope: str = "keep",
):  # fmt: skip
    """Give a Hugging Face model TRA attention in place (and return it): a forget gate per attention module, the
    settings in ``config.tra``, ``attn_implementation="tra"``. ``rope``: "keep" (TRA on the rotated q and k) or
    "remove" (no rotation: TRA's own positions). Fresh gates; load trained ones with ``load_tra``."""
    _check_model(model)
    if rope not in ROPE_CHOICES:
        raise ValueError(f"add_tra: rope = {rope!r}; expected one of {ROPE_CHOICES}")
    if not isinstance(local_window, int) or isinstance(local_window, bool) or local_window < 0:
        raise ValueError(f"add_tra: local_window = {local_window!r}; expected a non-negative integer")
    if hasattr(model.config, "tra"):
        raise ValueError(f"add_tra: {type(model).__name__} already has TRA attention (config.tra)")
    settings = {"threshold": float(threshold), "local_window": local_window, "keep_surrogate": float(keep_surrogate),
                "gate_bias_init": float(gate_bias_init), "rope": rope}  # fmt: skip
    config = model.config
    modules = attention_modules(model)
    if not modules:
        raise ValueError(f"add_tra: {type(model).__name__} has no attention module with q/k/v/o projections")
    std = getattr(config, "initializer_range", 0.02)
    for module in modules:
        heads = module.q_proj.out_features // module.head_dim
        gate = nn.Linear(config.hidden_size, heads, bias=True, device=module.q_proj.weight.device)
        nn.init.normal_(gate.weight, std=std)
        nn.init.constant_(gate.bias, settings["gate_bias_init"])
        module.forget_gate = gate.to(module.q_proj.weight.dtype)
        module.threshold_settings = settings
        module.register_forward_pre_hook(_keep_hidden, with_kwargs=True)
    if rope == "remove":
        for parent in [m for m in model.modules() if hasattr(m, "rotary_emb")]:
            parent.rotary_emb = _NoRotation(parent.rotary_emb)
    config.tra = settings
    model.set_attn_implementation(NAME)
    return model


def load_tra(folder, model_class=None, **kwargs):
    """A model saved after ``add_tra`` (``save_pretrained``), its gates included: the class from the folder's
    config (``model_class``: e.g. ``AutoModelForCausalLM``, the default), TRA added with the saved settings, then
    every weight loaded (none missing but tied ones, none unexpected)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    settings = getattr(config, "tra", None)
    if not isinstance(settings, dict) or set(settings) != set(SETTINGS):
        raise ValueError(f"load_tra: {folder} holds no model of add_tra (its config has no tra settings {SETTINGS})")
    del config.tra
    model = (model_class or AutoModelForCausalLM).from_config(config, **kwargs)
    add_tra(model, **settings)
    state = saved_weights(Path(folder))
    shared = {t.data_ptr() for name, t in model.state_dict().items() if name in state}
    missing = [n for n, t in model.state_dict().items() if n not in state and t.data_ptr() not in shared]
    unexpected = sorted(set(state) - set(model.state_dict()))
    if missing or unexpected:
        raise ValueError(f"load_tra: {folder}: weights missing {missing}, unexpected {unexpected}")
    model.load_state_dict(state, strict=False)
    return model.eval()


def saved_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a ``save_pretrained`` folder (one safetensors file, or the shards its index names)."""
    from safetensors.torch import load_file

    files = safetensors_files(folder)
    if not files:
        raise ValueError(f"load_tra: {folder} holds no safetensors weights; expected a folder of save_pretrained")
    return {name: t for file in files for name, t in load_file(str(folder / file)).items()}
