"""The mechanism that puts an attention of this library inside transformers' own model classes (Llama, Qwen3 and any
class that runs its attention through transformers' attention interface, ``_supports_attention_backend``).

transformers calls a registered attention function with the attention module and its projected (in those models,
rotated) q, k and v; it does not pass the hidden state, which a forget gate reads. So a gated kind attaches its gate
to each attention module (``forget_gate``, a Linear(hidden, heads): weights at the model's initializer range, bias at
the kind's ``gate_bias_init``) and a forward pre-hook that hands the module what the gate needs. A hook, not a
subclass: every model class and its checkpoints stay as transformers wrote them. The gate is part of the model's
state dict (``save_pretrained`` writes it) and the kind's settings are one dict of the config (``config.<key>``), from
which the loaders (``load_tra``, ``load_attention``) rebuild the model of a saved folder.

Every kind registers a mask function beside its attention function: it hands over the keys' 2D padding (without a
mask registration transformers would drop the mask) and refuses any pattern but causal, or, for a kind whose op has
a sliding window (TRA), causal within the layer's sliding window (Mistral's, Gemma 2 and 3's sliding layers), which
the attention then passes to the op. ``rope="remove"`` makes the model's rotary embedding the identity, so
positions come from the kind alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function

from .converted import base_config, mark_converted
from .modeling import safetensors_files

ROPE_CHOICES = ("keep", "remove")
# config key of each registered kind's settings -> (its attn_implementation name, its label): filled by ``register``
CONVERTED: dict[str, tuple[str, str]] = {}


@dataclass(frozen=True)
class Kind:
    """One convertible attention: its name, its registered implementation, its config key and setting names
    (``rope`` included), the function that checks its settings (``checked(caller, **settings) -> dict``) and its
    gate's pre-hook (None: no gate)."""

    name: str
    implementation: str
    key: str
    settings: tuple[str, ...]
    checked: Callable[..., dict]
    gate_hook: Callable | None


# The projections by which an attention module of transformers' decoders is recognised: separate q, k, v and o
# (Llama and most), q, k and v fused (Phi-3), or the output named ``dense`` (Phi).
LAYOUTS = (("q_proj", "k_proj", "v_proj", "o_proj"), ("qkv_proj", "o_proj"), ("q_proj", "k_proj", "v_proj", "dense"))


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The modules a Hugging Face decoder runs its attention interface from (one of ``LAYOUTS``)."""
    return [m for m in model.modules() if any(all(hasattr(m, p) for p in layout) for layout in LAYOUTS)]


def check_model(model, caller: str, sliding: bool = False) -> list[nn.Module]:
    """The attention modules of ``model``, or a ValueError (naming ``caller``) for a model this mechanism cannot
    convert: not a transformers model of the attention interface, sliding-window layers (unless ``sliding``: the
    kind runs them), no q/k/v/o projections, or a model converted already."""
    if not isinstance(model, PreTrainedModel) or not getattr(type(model), "_supports_attention_backend", False):
        raise ValueError(
            f"{caller}: {type(model).__name__} does not run its attention through transformers' attention interface "
            "(_supports_attention_backend); expected a model class that does, such as Llama or Qwen3"
        )
    config = model.config
    windowed = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    if not sliding and (windowed or "sliding_attention" in (getattr(config, "layer_types", None) or ())):
        raise ValueError(
            f"{caller}: {type(model).__name__} has sliding-window layers; expected full causal attention in every "
            "layer (of the kinds, TRA runs sliding-window layers)"
        )
    for key, (_, label) in CONVERTED.items():
        if hasattr(config, key):
            raise ValueError(
                f"{caller}: {type(model).__name__} already has {label} attention (config.{key}); expected a model "
                "with transformers' own attention"
            )
    modules = attention_modules(model)
    if not modules:
        raise ValueError(
            f"{caller}: {type(model).__name__} has no attention module with q/k/v/o projections; expected one of "
            f"the layouts {[', '.join(layout) for layout in LAYOUTS]}"
        )
    return modules


def check_rope(rope, caller: str) -> str:
    """``rope`` if it is one of ``ROPE_CHOICES``, else a ValueError naming ``caller``."""
    if rope not in ROPE_CHOICES:
        raise ValueError(f"{caller}: rope = {rope!r}; expected one of {ROPE_CHOICES}")
    return rope


def checked_options(options: type, caller: str, settings: dict) -> dict:
    """``settings`` checked by the kind's options class (as ``ModelConfig`` checks the same options) and as it holds
    them (an integer given for a float option becomes a float), or a ValueError naming ``caller`` and the setting."""
    try:
        checked = options(**settings)
    except ValueError as err:
        raise ValueError(f"{caller}: {err}") from None
    return {name: getattr(checked, name) for name in settings}


def check_converted(module: nn.Module, name: str, kind: str, label: str) -> None:
    """A ValueError unless ``module`` was converted by ``add_attention`` (``attention_settings``): transformers' own
    ``set_attn_implementation(name)`` leaves the config saying nothing of the kind, and a save loses it."""
    if not hasattr(module, "attention_settings"):
        raise ValueError(
            f"attn_implementation={name!r} on {type(module).__name__} of a model not converted to {label}; expected a "
            f"model prepared by tra_attn.hf.add_attention(model, kind={kind!r}, rope=...) (or loaded by "
            "tra_attn.hf.load_attention(folder)), whose config says so"
        )


def hidden_of(args, kwargs) -> torch.Tensor:
    """The input hidden state of an attention module's call (keyword or first positional argument)."""
    return kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]


def gate_logits(module: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """(B, S, H) logits of the module's forget gate, in fp32 at least (fp64 stays fp64)."""
    logits = module.forget_gate(hidden)
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def keep_hidden(module: nn.Module, args, kwargs):
    """Forward pre-hook: the attention module's input hidden state, for its gate."""
    module._gate_input = hidden_of(args, kwargs)


def attach_gates(model, modules: list[nn.Module], bias_init: float, hook: Callable) -> None:
    """A forget gate on each attention module (Linear(hidden, heads), weights N(0, initializer_range), bias
    ``bias_init``, in the module's dtype and device) and the forward pre-hook ``hook`` (with kwargs)."""
    config = model.config
    std = getattr(config, "initializer_range", 0.02)
    for module in modules:
        weight = next(module.parameters())
        gate = nn.Linear(config.hidden_size, config.num_attention_heads, bias=True, device=weight.device)
        nn.init.normal_(gate.weight, std=std)
        nn.init.constant_(gate.bias, bias_init)
        module.forget_gate = gate.to(weight.dtype)
        module.register_forward_pre_hook(hook, with_kwargs=True)


class NoRotation(nn.Module):
    """A rotary embedding that rotates by nothing (cos 1, sin 0): the model's positions are the attention's own."""

    def __init__(self, rotary: nn.Module):
        super().__init__()
        self.rotary = rotary

    def forward(self, x, position_ids, *args, **kwargs):  # Gemma 3's also takes its layer type
        cos, sin = self.rotary(x, position_ids, *args, **kwargs)
        return torch.ones_like(cos), torch.zeros_like(sin)


def remove_rotation(model: nn.Module) -> None:
    """Make every rotary embedding of ``model`` the identity (its buffers are not saved: the state dict is the same)."""
    for parent in [m for m in model.modules() if hasattr(m, "rotary_emb")]:
        parent.rotary_emb = NoRotation(parent.rotary_emb)


def convert(model, modules, *, implementation: str, key: str, settings: dict, gate_hook: Callable | None):
    """Give ``model`` (checked by ``check_model``) the registered attention ``implementation`` in place: each module's
    settings, the gates of a gated kind (``gate_hook``: its pre-hook), the rotation removed if ``settings["rope"]``
    says so, the settings in ``config.<key>``."""
    if gate_hook is not None:
        attach_gates(model, modules, settings["gate_bias_init"], gate_hook)
    for module in modules:
        module.attention_settings = settings
    if settings["rope"] == "remove":
        remove_rotation(model)
    setattr(model.config, key, settings)
    mark_converted(model.config)  # saved as converted: a plain load cannot take it for the family's model
    model.set_attn_implementation(implementation)
    return model


def is_sliding_causal(mask_function: Callable, window: int) -> bool:
    """Whether transformers' ``mask_function`` (batch, head, q, kv) -> bool is causal within ``window`` (key at
    distance d = q - kv kept iff 0 <= d < window), probed at the distances where another pattern would differ."""
    index = torch.tensor  # transformers' mask functions take index tensors
    distances = (-1, 0, 1, window - 1, window, window + 1)
    return all(
        bool(mask_function(index(0), index(0), index(q), index(q - d))) == (0 <= d < window)
        for q in (window + 1, 3 * window + 2)
        for d in distances
    )


def padding_mask_function(name: str, sliding: bool = False) -> Callable:
    """The mask function of the attention implementation ``name``: the keys' (B, kv_length) padding (True: a token),
    or None when there is none. The attention is causal by construction, and with ``sliding`` it also runs a
    layer's sliding window (transformers passes its size as ``local_size``); any other pattern is refused."""

    def padding_mask(
        batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=causal_mask_function,
        attention_mask=None, local_size=None, **kwargs,
    ):  # fmt: skip
        windowed = sliding and local_size is not None and is_sliding_causal(mask_function, int(local_size))
        if mask_function is not causal_mask_function and not windowed:
            raise ValueError(
                f"attn_implementation={name!r}: this model's layers use a mask other than causal"
                + (" or causal within a sliding window" if sliding else " (sliding or chunked attention)")
                + "; expected "
                + ("one of those" if sliding else "full causal attention")
            )
        # A static cache's slots past the queries hold no keys yet: the mask then covers the filled ones only, and
        # the attention trims the keys to it (``trim_to_mask``).
        used = kv_length if q_offset is None else min(kv_length, int(q_offset) + q_length)
        if attention_mask is None:
            mask = torch.ones(batch_size, used, dtype=torch.bool, device=kwargs.get("device", "cpu"))
        else:
            mask = attention_mask.bool()[:, kv_offset : kv_offset + used]
        return None if used == kv_length and bool(mask.all()) else mask

    return padding_mask


def register(name: str, forward: Callable, key: str, label: str, sliding: bool = False) -> None:
    """Register ``forward`` as the attention implementation ``name`` with its padding mask function (``sliding``:
    it runs sliding-window layers too), and ``key`` as the config key of its settings (``label``: its name in
    messages)."""
    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, padding_mask_function(name, sliding))
    CONVERTED[key] = (name, label)


def trim_to_mask(key, value, mask):
    """(key, value, mask): a static cache's keys and values trimmed to its filled slots (the mask's length); the
    mask None when every key is a token."""
    if mask is not None and mask.shape[-1] < key.shape[2]:
        key, value = key[:, :, : mask.shape[-1]], value[:, :, : mask.shape[-1]]
    if mask is not None and bool(mask.all()):
        mask = None
    return key, value, mask


def repeat_groups(query, key, value):
    """Grouped-query attention: every query head reads its group's keys and values (query head h reads kv head
    h // groups, as transformers' ``repeat_kv``)."""
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    return key, value


def segments_of(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The ops' ``segment_ids`` (B, Sk) of a padding mask (0: a token, -1: padding), or None without one."""
    return None if mask is None else torch.where(mask, 0, -1)


def saved_weights(folder: Path, caller: str) -> dict[str, torch.Tensor]:
    """Every tensor of a ``save_pretrained`` folder (one safetensors file, or the shards its index names)."""
    from safetensors.torch import load_file

    files = safetensors_files(folder)
    if not files:
        raise ValueError(f"{caller}: {folder} holds no safetensors weights; expected a folder of save_pretrained")
    return {name: t for file in files for name, t in load_file(str(folder / file)).items()}


def load_weights(model, folder, caller: str):
    """``model`` with every weight of ``folder`` loaded (none missing but tied ones, none unexpected), in eval mode."""
    state = saved_weights(Path(folder), caller)
    shared = {t.data_ptr() for name, t in model.state_dict().items() if name in state}
    missing = [n for n, t in model.state_dict().items() if n not in state and t.data_ptr() not in shared]
    unexpected = sorted(set(state) - set(model.state_dict()))
    if missing or unexpected:
        raise ValueError(f"{caller}: {folder}: weights missing {missing}, unexpected {unexpected}")
    model.load_state_dict(state, strict=False)
    return model.eval()


def saved_settings(folder, key: str, names: tuple[str, ...]):
    """(config, settings) of a saved folder: its config without the ``key`` settings, and those settings; settings
    None (and the config as saved) if the config holds no dict under ``key`` with exactly the keys ``names``."""
    from transformers import AutoConfig

    config = base_config(AutoConfig.from_pretrained(folder))
    settings = getattr(config, key, None)
    if not isinstance(settings, dict) or set(settings) != set(names):
        return config, None
    delattr(config, key)
    return config, settings
