"""The attention registry: one entry per kind says what the layer is (its class and capabilities).

Adding a kind is one file with an ``Attention`` subclass (and, if it has options, their dataclass: its
``Options``) and one ``register_attention(...)`` call (for the built-in kinds, a line in
``layers/__init__.py``). The model and evaluation batch sizing read this registry; how comparisons show and
train a kind (label, colour, learning rate) is its row in the method table, ``experiments/methods.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .base import Attention
from .options import KindOptions

if TYPE_CHECKING:  # type hints only: the model config is data the layers read
    from ..models.config import ModelConfig


@dataclass(frozen=True)
class AttentionKind:
    """A registered attention kind.

    name: the ``ModelConfig.attention`` string; cls: the layer class (its ``Options`` are the kind's
    options); materializes_scores: whether the layer builds (B, H, S, S) tensors whatever its options (sizes
    evaluation batches; ``materializes`` adds the option values that do).
    """

    name: str
    cls: type[Attention]
    materializes_scores: bool = False

    @property
    def options(self) -> type[KindOptions]:
        return self.cls.Options

    def materializes(self, options: KindOptions) -> bool:
        """Whether the layer with ``options`` builds (B, H, S, S) tensors: always (``materializes_scores``), or for
        some option values (the class's ``materializes``: TRA's key gate)."""
        return self.materializes_scores or self.cls.materializes(options)

    def make_options(self, data) -> KindOptions:
        """This kind's options from a dict (or an options instance), checked; ValueError naming the option."""
        return self.options.from_dict(data, f"attention = {self.name!r}")


ATTENTION_KINDS: dict[str, AttentionKind] = {}


def register_attention(kind: AttentionKind, replace: bool = False) -> AttentionKind:
    """Add ``kind`` to the registry; refuses to overwrite an existing name unless ``replace``."""
    if not isinstance(kind, AttentionKind):
        raise TypeError(f"register_attention: kind = {kind!r}; expected an AttentionKind")
    if not (isinstance(kind.cls, type) and issubclass(kind.cls, Attention)):
        raise TypeError(f"register_attention: {kind.name}.cls = {kind.cls!r}; expected an Attention subclass")
    if kind.name in ATTENTION_KINDS and not replace:
        raise ValueError(f"register_attention: {kind.name!r} is already registered; pass replace=True to override")
    ATTENTION_KINDS[kind.name] = kind
    return kind


def unregister_attention(name: str) -> None:
    """Remove a kind (for tests and plug-ins that register temporary kinds)."""
    ATTENTION_KINDS.pop(name, None)


def attention_kind(name: str, argument: str = "attention") -> AttentionKind:
    """The registry entry of ``name``, or a ValueError naming ``argument`` and listing the registered kinds."""
    if not isinstance(name, str) or name not in ATTENTION_KINDS:
        raise ValueError(f"{argument} = {name!r}; expected one of {list(ATTENTION_KINDS)}")
    return ATTENTION_KINDS[name]


def check_model_config(config: ModelConfig) -> None:
    """The checks of a ModelConfig that need the registry: its attention is a registered kind, its options are
    that kind's, and the kind can honour them at the model's sizes (the class's ``check_options``). ModelConfig
    runs them when it is built; models and runs run them again (a config may have been edited since)."""
    kind = attention_kind(config.attention, "ModelConfig.attention")
    options = config.attention_options
    if type(options) is not kind.options:
        raise ValueError(
            f"ModelConfig.attention_options = {options!r}; expected {kind.options.__name__} for attention = "
            f"{kind.name!r}"
        )
    kind.cls.check_options(options, config.d_model, config.n_heads)
    kind.cls.check_block_parts(output_gate=config.output_gate, output_norm=config.output_norm, kv_shift=config.kv_shift)
