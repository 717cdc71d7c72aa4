"""The language model: its config, the network (which owns its loss), generation and save/load."""

from .config import ModelConfig
from .io import CONFIG_NAME, WEIGHTS_NAME
from .lm import TransformerLM
from .loss import IGNORE_INDEX

__all__ = ["CONFIG_NAME", "IGNORE_INDEX", "WEIGHTS_NAME", "ModelConfig", "TransformerLM"]
