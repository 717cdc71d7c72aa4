"""``add_attention(model, kind=..., rope=...)``: convert a model of transformers' own classes to TRA or to one of the
two rivals that convert the same way, FoX and ALiBi; ``load_attention(folder)`` loads any of them back.

| kind    | attn_implementation | settings (config key)                                                    | gate |
|---------|---------------------|--------------------------------------------------------------------------|------|
| "tra"   | "tra"               | threshold, local_window, keep_surrogate, gate_bias_init (``config.tra``) | yes  |
| "fox"   | "tra_attn.fox"      | gate_bias_init (``config.fox_attention``)                                | yes  |
| "alibi" | "tra_attn.alibi"    | none (``config.alibi_attention``)                                        | no   |

Each config key also holds ``rope`` ("keep" or "remove"). TRA keeps the name and config key ``add_tra`` has always
used (``add_attention(model, kind="tra", ...)`` is ``add_tra``); the rivals' names are namespaced so that they cannot
clash with transformers' own implementations.
"""

from __future__ import annotations

from .alibi import KIND as ALIBI
from .attach import Kind, check_model, convert, load_weights
from .converted import ConvertedConfig, base_config
from .fox import KIND as FOX
from .interface import KIND as TRA

KINDS = {kind.name: kind for kind in (TRA, FOX, ALIBI)}


def kind_of(name) -> Kind:
    """The kind called ``name``, or a ValueError naming the kinds there are."""
    if name not in KINDS:
        raise ValueError(f"add_attention: kind = {name!r}; expected one of {tuple(KINDS)}")
    return KINDS[name]


def add_attention(model, kind: str, *, rope: str, **settings):
    """Give a Hugging Face model the attention ``kind`` ("tra", "fox" or "alibi") in place, and return it: ``rope``
    "keep" (the kind on the rotated q and k) or "remove" (no rotation: the kind's own positions), ``settings`` the
    kind's own (module docstring). Fresh gates; load trained ones with ``load_attention``."""
    spec = kind_of(kind)
    unknown = sorted(set(settings) - set(spec.settings))
    if unknown:
        own = [name for name in spec.settings if name != "rope"]
        raise ValueError(f"add_attention: kind {kind!r} has no setting {unknown}; expected some of {own} or none")
    modules = check_model(model, "add_attention", sliding=kind == "tra")
    checked = spec.checked("add_attention", rope=rope, **settings)
    return convert(
        model, modules, implementation=spec.implementation, key=spec.key, settings=checked, gate_hook=spec.gate_hook
    )


def converted_kind(config) -> str | None:
    """The kind a model's config says it was converted to (its settings' key), or None."""
    return next((k.name for k in KINDS.values() if isinstance(getattr(config, k.key, None), dict)), None)


def load_attention(folder, model_class=None, **kwargs):
    """A model saved after ``add_attention`` or ``add_tra`` (``save_pretrained``), its gates included: the class
    from the folder's config (``model_class``: e.g. ``AutoModelForCausalLM``, the default), the kind added with the
    saved settings, then every weight loaded (none missing but tied ones, none unexpected)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = base_config(AutoConfig.from_pretrained(folder))
    spec = KINDS.get(converted_kind(config))
    if spec is None or set(getattr(config, spec.key)) != set(spec.settings):
        keys = ", ".join(f"config.{k.key}" for k in KINDS.values())
        raise ValueError(
            f"load_attention: {folder} holds no model of add_attention (its config has none of {keys} with its "
            "kind's settings); expected a folder saved after add_attention or add_tra"
        )
    settings = getattr(config, spec.key)
    delattr(config, spec.key)
    model = (model_class or AutoModelForCausalLM).from_config(config, **kwargs)
    add_attention(model, spec.name, **settings)
    return load_weights(model, folder, "load_attention")


# Keyword arguments the Auto classes pass to a model class's from_pretrained by themselves.
_AUTO_ARGUMENTS = {"_from_auto", "trust_remote_code", "adapter_kwargs", "revision", "code_revision", "cache_dir",
                   "force_download", "proxies", "token", "local_files_only", "subfolder", "_commit_hash",
                   "name_or_path"}  # fmt: skip


class ConvertedForCausalLM:
    """What ``AutoModelForCausalLM`` maps ``ConvertedConfig`` to: a folder loads through ``load_attention`` (the
    family's class, the kind with its saved settings, every weight), a config builds the converted model."""

    config_class = ConvertedConfig

    @classmethod
    def from_pretrained(cls, folder, *args, config=None, **kwargs):
        dtype = kwargs.pop("dtype", None) or kwargs.pop("torch_dtype", None)
        unknown = sorted(k for k, v in kwargs.items() if k not in _AUTO_ARGUMENTS and v is not None)
        if args or unknown:
            raise ValueError(
                f"{folder}: a model converted by add_attention loads through "
                f"tra_attn.hf.load_attention(folder, dtype=...), which takes no {unknown or list(args)}"
            )
        return load_attention(folder, **({"dtype": dtype} if dtype not in (None, "auto") else {}))

    @classmethod
    def _from_config(cls, config, **kwargs):
        from transformers import AutoModelForCausalLM

        family = base_config(config)
        spec = KINDS[converted_kind(family)]
        settings = getattr(family, spec.key)
        delattr(family, spec.key)
        return add_attention(AutoModelForCausalLM.from_config(family, **kwargs), spec.name, **settings)
