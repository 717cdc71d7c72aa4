"""Hugging Face interop (optional extra ``[hf]``): ``TRAConfig``, ``TRAForCausalLM``, tokenizers, conversion, and
TRA inside transformers' own classes (``add_tra``, ``load_tra``: ``attn_implementation="tra"``, ``interface.py``),
and TRA, FoX or ALiBi by one mechanism (``add_attention``, ``load_attention``: ``attention.py``).

Importing this package registers the model with ``AutoConfig``, ``AutoModelForCausalLM`` and
``AutoTokenizer``, and the attention functions "tra", "tra_attn.fox" and "tra_attn.alibi" with transformers'
attention and mask interfaces. ``import tra_attn`` does that too, as soon as ``transformers`` is imported (before or
after), without importing ``transformers`` itself (see ``tra_attn/hf_hook.py``).
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("transformers") is None:
    raise ImportError(
        "tra_attn.hf needs the Python package 'transformers'; expected `pip install -e .[hf]` "
        "(or `pip install 'transformers>=5.24,<6'`)"
    )

from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from .attention import ConvertedForCausalLM, add_attention, load_attention  # noqa: E402
from .configuration import MODEL_TYPE, TRAConfig  # noqa: E402
from .convert import to_hf, to_native  # noqa: E402
from .converted import CONVERTED_TYPE, ConvertedConfig  # noqa: E402
from .interface import add_tra, load_tra  # noqa: E402
from .modeling import TRACache, TRAForCausalLM  # noqa: E402
from .tokenization import TRAByteTokenizer, hf_tokenizer  # noqa: E402


def register() -> None:
    """Make ``model_type = "tra"`` and a folder of a model converted by ``add_attention`` (``converted.py``) loadable by
    the Auto classes (idempotent)."""
    AutoConfig.register(MODEL_TYPE, TRAConfig, exist_ok=True)
    AutoModelForCausalLM.register(TRAConfig, TRAForCausalLM, exist_ok=True)
    AutoConfig.register(CONVERTED_TYPE, ConvertedConfig, exist_ok=True)  # a folder saved after add_attention
    AutoModelForCausalLM.register(ConvertedConfig, ConvertedForCausalLM, exist_ok=True)
    AutoTokenizer.register(TRAConfig, slow_tokenizer_class=TRAByteTokenizer, exist_ok=True)


register()

__all__ = [
    "TRAByteTokenizer",
    "TRACache",
    "TRAConfig",
    "TRAForCausalLM",
    "add_attention",
    "add_tra",
    "hf_tokenizer",
    "load_attention",
    "load_tra",
    "register",
    "to_hf",
    "to_native",
]
