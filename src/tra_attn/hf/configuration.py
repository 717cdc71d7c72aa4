"""``TRAConfig``: a Hugging Face ``PreTrainedConfig`` whose fields are exactly ``ModelConfig``'s.

The fields are copied from the ``ModelConfig`` dataclass when this module is imported, so the two
can never drift apart; ``to_model_config`` validates them through ``ModelConfig`` itself. The attention
kind's options are one field, ``attention_options`` (a dict in the JSON). A folder written by an earlier
version (0.2's flat option fields, a former TRA ablation kind) is refused naming ``tra upgrade``, which
converts it.
"""

from __future__ import annotations

import dataclasses

from transformers import PreTrainedConfig

from ..models.config import ModelConfig
from ..models.io import HF_MODEL_TYPE as MODEL_TYPE
from ..models.io import check_hf_fields
from .tokenization import special_token_ids


def _fields_of_model_config() -> dict:
    """A class namespace declaring every ModelConfig field, with its type and default (the attention options
    as the dict they are in JSON)."""
    namespace: dict = {"__annotations__": {}}
    for f in dataclasses.fields(ModelConfig):
        if f.name == "attention_options":
            namespace["__annotations__"][f.name] = dict
            namespace[f.name] = dataclasses.field(default_factory=dict)
        else:
            namespace["__annotations__"][f.name] = f.type
            namespace[f.name] = f.default
    return namespace


class TRAConfig(PreTrainedConfig):
    """The configuration of ``TRAForCausalLM``: every ``ModelConfig`` field, plus Hugging Face's own."""

    model_type = MODEL_TYPE
    attribute_map = {"hidden_size": "d_model", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"}
    locals().update(_fields_of_model_config())  # a class body's locals() is its namespace
    use_cache: bool = True  # generate() decodes with the KV cache

    def __post_init__(self, **kwargs):
        """Refuses the fields of an earlier version (``tra upgrade`` converts its folder)."""
        check_hf_fields({**kwargs, "attention": self.attention}, "the Hugging Face config")
        super().__post_init__(**kwargs)

    def to_model_config(self) -> ModelConfig:
        """The library's ModelConfig of these fields (validated: a bad value raises ValueError)."""
        return ModelConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(ModelConfig)})

    @classmethod
    def from_model_config(cls, config: ModelConfig, **kwargs) -> TRAConfig:
        """A TRAConfig with ``config``'s fields and the special token ids of its tokenizer (``special_token_ids``:
        those of the Hugging Face tokenizer, which clients read from the config); ``kwargs`` set Hugging Face
        fields (e.g. eos_token_id), over those."""
        return cls(**dataclasses.asdict(config), **{**special_token_ids(config.tokenizer), **kwargs})
