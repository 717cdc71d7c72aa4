"""A model converted by ``add_attention`` saves as what it is: its folder's ``config.json`` says
``"model_type": "converted_by_tra_attn"`` with the family's own as ``base_model_type``, so that a plain
``AutoModelForCausalLM.from_pretrained(folder)`` never loads it as the family's model without its kind (its gates
dropped as "unexpected", its attention SDPA: logits off by whole units).

Once ``tra_attn`` is imported (as for the native model, ``configuration.py``), the Auto classes load such a folder as
the converted model (``attention.ConvertedForCausalLM``: ``load_attention``); a process without it fails at the
unknown model type instead. The
converted model's config is an instance of a subclass of its family's config class (``converted_config_class``:
``isinstance`` holds, every field reads as before) that writes the two fields when it is saved.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

from ..models.io import CONVERTED_BASE_FIELD, CONVERTED_MODEL_TYPE

CONVERTED_TYPE, BASE_TYPE = CONVERTED_MODEL_TYPE, CONVERTED_BASE_FIELD
_CLASSES: dict[type, type] = {}


def converted_config_class(base: type) -> type:
    """The subclass of the family config class ``base`` that a converted model's config becomes: the same fields,
    saved with ``model_type = "converted_by_tra_attn"`` and the family's as ``base_model_type``. One per family, named
    in this module so that configs pickle."""
    if base in _CLASSES:
        return _CLASSES[base]

    def to_dict(self) -> dict:
        data = base.to_dict(self)
        return {**data, "model_type": CONVERTED_TYPE, BASE_TYPE: base.model_type}

    name = f"Converted{base.__name__}"
    converted = type(name, (base,), {"to_dict": to_dict, "__module__": __name__, "__doc__": f"{base.__name__}, "
                                     "converted by add_attention (saved as converted_by_tra_attn)."})  # fmt: skip
    globals()[name] = _CLASSES[base] = converted
    return converted


def mark_converted(config) -> None:
    """Make a converted model's config save as converted (in place; idempotent)."""
    if not isinstance(config, tuple(_CLASSES.values())):
        config.__class__ = converted_config_class(type(config))


def base_config(config):
    """The family config of ``config``: a ``ConvertedConfig`` read from a folder becomes its family's config class
    with every saved field (the kind's settings included); any other config is returned as it is."""
    if not isinstance(config, ConvertedConfig):
        return config
    from transformers import CONFIG_MAPPING

    saved = dict(config.saved)
    family = saved.pop(BASE_TYPE, None)
    if family not in CONFIG_MAPPING:
        raise ValueError(
            f"{config.name_or_path}: config.json says base_model_type = {family!r}; expected the model type of a "
            "transformers family (a folder saved from a model converted by add_attention)"
        )
    saved.pop("model_type", None)
    return CONFIG_MAPPING[family].from_dict(saved)


class ConvertedConfig(PreTrainedConfig):
    """What ``AutoConfig`` reads a converted model's folder as: the saved fields, untouched (``saved``), for
    ``base_config`` and the loaders."""

    model_type = CONVERTED_TYPE

    def to_dict(self) -> dict:
        return dict(self.saved)

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """The folder's fields kept as saved; every keyword is left for the loader (``return_unused_kwargs``)."""
        config = cls()
        config.saved = dict(config_dict)
        config.name_or_path = config_dict.get("_name_or_path", "")
        if kwargs.pop("return_unused_kwargs", False):
            return config, kwargs
        return config
