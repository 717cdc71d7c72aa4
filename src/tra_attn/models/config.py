"""Model configuration: one dataclass, serialised to JSON next to every checkpoint and result.

It holds the attention kind's name and that kind's options (``attention_options``, the kind's own dataclass,
declared and checked by the kind in ``layers/``), never a field of one kind. It checks its own fields, and
asks the attention registry to check the kind and its options (``layers.registry.check_model_config``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

from ..layers import KindOptions, attention_kind, check_model_config
from ..utils.checks import boolean, check_declared, in_range, one_of, option, positive, positive_int
from ..utils.dataclass_io import current_fields, dataclass_from_dict

VERSION = 11

# Until ModelConfig version 8 the TRA ablations were kinds of their own; they are options of "tra" now (a config
# naming one is converted by `tra upgrade`, tra_attn/upgrade/configs.py).
LEGACY_TRA_KINDS = {"tra_keygate": {"gate": "key"}, "tra_nothreshold": {"threshold": -math.inf},
                    "tra_nodistance": {"distance": False}}  # fmt: skip


def legacy_kind_error(attention: str) -> str:
    """The refusal of ``attention``, a former TRA ablation kind, where a config names it."""
    options = ", ".join(f"{k} = {v!r}" for k, v in LEGACY_TRA_KINDS[attention].items())
    return (
        f"ModelConfig.attention = {attention!r}; expected 'tra' with the option {options} (the TRA ablations are "
        "options of 'tra' since ModelConfig version 8; `tra upgrade PATH` converts a saved config naming the former "
        "kind)"
    )


INIT_SCHEMES = ("normal", "notebook")
_probability = in_range(0.0, 1.0, what="a probability")


def _block_style(value) -> str | None:
    return None if value in ("prenorm", "paper") else "'prenorm' or 'paper'"


def missing_options(data: dict) -> list[str]:
    """The options of its kind that a saved model config's ``attention_options`` lacks (none for what is not a dict
    of a known kind: the config refuses that by name when it is built)."""
    options, kind = data.get("attention_options"), data.get("attention")
    if not isinstance(options, dict) or not isinstance(kind, str) or kind in LEGACY_TRA_KINDS:
        return []
    try:
        names = attention_kind(kind).options.names()
    except ValueError:
        return []
    return [name for name in names if name not in options]


def _check_every_option(data: dict, where) -> None:
    """A ValueError naming the options of the kind that a saved config's ``attention_options`` lacks: a saved
    config holds every option, and one that lost a field would otherwise load as the default's model."""
    missing = missing_options(data)
    if missing:
        kind = data["attention"]
        names = attention_kind(kind).options.names()
        at = f"{where}: " if where else ""
        raise ValueError(
            f"{at}ModelConfig.attention_options: missing options {missing} of attention = {kind!r}; expected every "
            f"option of the kind ({', '.join(names)}): a saved config holds them all (one written before an option "
            "existed is converted by `tra upgrade PATH`)"
        )


@dataclass
class ModelConfig:
    """Decoder-only language model; ``attention`` picks the attention layer by registry name, and
    ``attention_options`` are that kind's options (a dict becomes the kind's options dataclass)."""

    vocab_size: int = option(256, "token vocabulary size", positive_int)
    d_model: int = option(128, "residual stream width", positive_int)
    n_layers: int = option(2, "transformer blocks", positive_int)
    n_heads: int = option(4, "attention heads (d_model must be a multiple)", positive_int)
    attention: str = option("tra", "attention kind, a name from the registry")
    attention_options: KindOptions | dict = option(
        help="the kind's options: a dict (unset options take their defaults) or the kind's Options",
        default_factory=dict,
    )
    block_style: str = option(
        "prenorm", "'prenorm' or 'paper' (x = norm(x); x = x + f(x), as in the TRA notebook)", _block_style
    )
    mlp_ratio: float = option(
        2.0, "SwiGLU hidden width / d_model (the notebook's d -> 4d split in two halves)", positive
    )
    mlp_bias: bool = option(True, "biases in the MLP projections", boolean)
    dropout: float = option(
        0.0, "on the embeddings, the MLP hidden layer and (residual_dropout) both branches", _probability
    )
    residual_dropout: bool = option(
        True, "apply dropout to the attention and MLP outputs before they join the residual stream", boolean
    )
    attention_dropout: float = option(
        0.0,
        "dropout on the pre-softmax attention logits (the TRA notebook's placement; training then materialises the "
        "(S, S) logits of every kind)",
        _probability,
    )
    output_gate: bool = option(
        False,
        "sigmoid(x W_g) times each head's attention output, before the output projection (FoX Pro's and gated "
        "attention's gate, W_g d_model x d_model without bias), for any kind",
        boolean,
    )
    output_norm: bool = option(
        False,
        "RMSNorm of each head's attention output (a weight per head and channel; FoX Pro's), for any kind",
        boolean,
    )
    kv_shift: bool = option(
        False,
        "FoX Pro's token shift of keys and values, (1 - a) k_l + a k_(l-1) with a = sigmoid(x . u_h) per head and "
        "position (and b for values), within each document, for any kind",
        boolean,
    )
    norm_eps: float = option(1e-6, "RMSNorm epsilon", positive)
    init_std: float = option(0.02, "standard deviation of the initial weights", positive)
    init_scheme: str = option(
        "normal",
        "'normal' (N(0, init_std), GPT-2 residual scaling) or 'notebook' (the TRA authors': PyTorch defaults, "
        "embedding U(-0.01, 0.01), head N(0, 0.02))",
        one_of(*INIT_SCHEMES),
    )
    tokenizer: dict | None = option(
        None, "the text tokenizer the model reads (its describe(): name, files' hashes), or None"
    )

    def __post_init__(self):
        """The declared checks, the rules that span fields, then the registry's (``check_model_config``)."""

        def fail(name: str, expected: str):
            raise ValueError(f"ModelConfig.{name} = {getattr(self, name)!r}; expected {expected}")

        check_declared(self)
        if self.d_model % self.n_heads:
            fail("d_model", f"a multiple of n_heads = {self.n_heads}")
        if self.mlp_width < 1:
            fail(
                "mlp_ratio",
                f"a ratio giving an MLP at least 1 wide (mlp_ratio * d_model >= 1, d_model = {self.d_model})",
            )
        if self.tokenizer is not None:
            described = isinstance(self.tokenizer, dict) and isinstance(self.tokenizer.get("name"), str)
            if not described or not isinstance(self.tokenizer.get("vocab_size"), int):
                fail("tokenizer", "None or a tokenizer description with 'name' and 'vocab_size'")
            if self.tokenizer["vocab_size"] > self.vocab_size:
                fail("tokenizer", f"a tokenizer of at most vocab_size = {self.vocab_size} ids")
        if isinstance(self.attention, str) and self.attention in LEGACY_TRA_KINDS:
            raise ValueError(legacy_kind_error(self.attention))
        self.attention_options = attention_kind(self.attention, "ModelConfig.attention").make_options(
            self.attention_options
        )
        check_model_config(self)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return {"version": VERSION, **dataclasses.asdict(self)}

    @property
    def mlp_width(self) -> int:
        """The SwiGLU hidden width the model builds: ``mlp_ratio * d_model``, rounded down."""
        return int(self.mlp_ratio * self.d_model)

    @classmethod
    def from_dict(cls, data: dict, partial: bool = False, where=None) -> ModelConfig:
        """Unknown fields are errors, and so are missing ones unless ``partial``: a saved config that lacks a field
        would otherwise load silently as a different model. Only the current version is read: an earlier one is
        refused, naming ``tra upgrade`` (``where``: the file, for the message)."""
        data = current_fields(cls.__name__, data, VERSION, where, partial)
        if not partial:
            _check_every_option(data, where)
        return dataclass_from_dict(cls, data, required=not partial, where=where)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
