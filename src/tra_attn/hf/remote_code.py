"""The classes a Hugging Face folder names in its ``auto_map``, so that a process that never imports
``tra_attn`` (``lm_eval --model hf``, a plain ``AutoModelForCausalLM``) loads it with ``trust_remote_code=True``.

``tra convert --to hf`` copies this file into the folder; no model code lives here: the classes are the
installed package's, subclassed so that ``transformers`` marks these (not the package's own) as loaded from
the folder.
"""

from tra_attn.hf import TRAByteTokenizer as _TRAByteTokenizer
from tra_attn.hf import TRAConfig as _TRAConfig
from tra_attn.hf import TRAForCausalLM as _TRAForCausalLM


class TRAConfig(_TRAConfig):
    """``tra_attn.hf.TRAConfig``."""


class TRAForCausalLM(_TRAForCausalLM):
    """``tra_attn.hf.TRAForCausalLM``."""

    config_class = TRAConfig


class TRAByteTokenizer(_TRAByteTokenizer):
    """``tra_attn.hf.TRAByteTokenizer``."""
