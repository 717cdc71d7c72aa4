"""Model configuration: one dataclass, serialised to JSON next to every checkpoint and result.

It holds the attention kind's name and that kind's options (``attention_options``, the kind's own dataclass,
declared and checked by the kind in ``layers/``), never a field of one kind. It checks its own fields, and
asks the attention registry to check the kind and its options (``layers.registry.check_model_config``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field

from ..layers import ATTENTION_KINDS, KindOptions, attention_kind, check_model_config
from ..utils.dataclass_io import dataclass_from_dict, split_version

VERSION = 8

# Version 6 and earlier kept every kind's options as flat fields of the model config: flat name -> option.
LEGACY_OPTIONS = {
    "tra_threshold": "threshold",
    "tra_impl": "impl",
    "tra_learned_temperature": "learned_temperature",
    "tra_dense_heads": "dense_heads",
    "tra_local_window": "local_window",
    "tra_dense_window": "dense_window",
    "tra_threshold_warmup": "threshold_warmup",
    "tra_keep_surrogate": "keep_surrogate",
    "rope_base": "base",
    "cope_max_pos": "max_pos",
    "gate_bias_init": "gate_bias_init",
}


# Up to version 7 the TRA ablations were kinds of their own; since version 8 they are options of "tra". Each former
# kind: the options of "tra" it stands for, and the options it declared (those of "tra" at version 7 it honoured).
_LEGACY_TRA_OPTIONS = (
    "threshold", "impl", "learned_temperature", "dense_heads", "local_window", "dense_window", "threshold_warmup",
    "keep_surrogate", "gate_bias_init", "threshold_shift", "keep_penalty", "keep_margin",
)  # fmt: skip
LEGACY_TRA_KINDS = {
    "tra_keygate": ({"gate": "key"}, tuple(o for o in _LEGACY_TRA_OPTIONS if o not in ("impl", "keep_surrogate"))),
    "tra_nothreshold": ({"threshold": -math.inf}, ("impl", "learned_temperature", "gate_bias_init")),
    "tra_nodistance": ({"distance": False}, tuple(o for o in _LEGACY_TRA_OPTIONS if o != "gate_bias_init")),
}


def migrate_tra_ablation(data: dict) -> dict:
    """A version-7 (or older) config dict whose ``attention`` names a former TRA ablation kind, as the TRA kind with
    the option values that ablation is now (``LEGACY_TRA_KINDS``), its other options kept; any other dict as it is.

    ``tra_keygate`` -> ``attention = "tra"`` with ``gate = "key"``; ``tra_nothreshold`` -> ``threshold = -inf``;
    ``tra_nodistance`` -> ``distance = False``. The layer of each computes what the former kind's layer computed,
    with the same parameters (state-dict keys) and the same outputs. Options that are not a dict are left for
    ModelConfig to refuse by name.
    """
    if data.get("attention") not in LEGACY_TRA_KINDS:
        return data
    ablation, _ = LEGACY_TRA_KINDS[data["attention"]]
    options = data.get("attention_options")
    options = {} if options is None else options
    if isinstance(options, dict):
        options = {**options, **ablation}
    return {**data, "attention": "tra", "attention_options": options}


def legacy_kind_error(attention: str) -> str:
    """The refusal of ``attention``, a former TRA ablation kind, where a current config names it."""
    options = ", ".join(f"{k} = {v!r}" for k, v in LEGACY_TRA_KINDS[attention][0].items())
    return (
        f"ModelConfig.attention = {attention!r}; expected 'tra' with the option {options} (the TRA ablations are "
        f"options of 'tra' since ModelConfig version 8; a saved config naming the former kind is converted when it "
        "is read)"
    )


def _declared_options(attention) -> list[str] | None:
    """The option names the kind ``attention`` declares (at version 7 for a former TRA ablation); None: unknown."""
    if attention in LEGACY_TRA_KINDS:
        return list(LEGACY_TRA_KINDS[attention][1])
    kind = ATTENTION_KINDS.get(attention)
    return None if kind is None else kind.options.names()


def fold_legacy_options(data: dict) -> dict:
    """A version-6 (or older) config dict with its flat option fields moved into ``attention_options``.

    Each flat field becomes the option of the same meaning if the config's kind declares it; the others are
    dropped: in 0.2 they had no effect on that kind (RoPE never read ``cope_max_pos``; the kinds without a
    threshold refused non-zero threshold options, and ``tra_nothreshold`` ignored ``tra_threshold``).
    """
    legacy = {new: data.pop(old) for old, new in LEGACY_OPTIONS.items() if old in data}
    declared = _declared_options(data.get("attention", "tra"))
    if declared is not None:  # an unknown kind is refused by name when the config is built
        legacy = {name: value for name, value in legacy.items() if name in declared}
    given = data.get("attention_options")
    data["attention_options"] = {**legacy, **given} if isinstance(given, dict) else (given or legacy)
    return data


def migrate(data: dict) -> dict:
    """A config dict of any earlier version as a version-``VERSION`` dict (without the version key).

    Version 1 (0.1, no "version" key) had no ``tokenizer``: those models read task vocabularies (None).
    Version 2 (0.2) had no ``tra_learned_temperature``: its TRA scores were never rescaled (False).
    Version 3 had no ``attention_dropout``, ``residual_dropout``, ``init_scheme`` or ``tra_dense_heads``: no
    dropout on the logits (0), dropout on both residual branches (True), the GPT-2 style initialisation
    ("normal") and every TRA head thresholded (0).
    Version 4 had no ``tra_threshold_warmup``: the warm-up was a training option (TrainConfig version 4
    moves it here), so a model config of its own gets 0.
    Version 5 had no ``tra_local_window``, ``tra_dense_window`` or ``tra_keep_surrogate``: no local window
    in the thresholded heads, every causal key in the dense heads, the exact gradient in training (0 for all).
    Version 6 kept the options of every kind as flat fields (``tra_*``, ``rope_base``, ``cope_max_pos``,
    ``gate_bias_init``): they move into ``attention_options`` (``fold_legacy_options``).
    Version 7 had the TRA ablations as kinds (``tra_keygate``, ``tra_nothreshold``, ``tra_nodistance``): they become
    TRA with the options they are now (``migrate_tra_ablation``).
    """
    data, version = split_version("ModelConfig", data, VERSION)
    if version == 1:
        data.setdefault("tokenizer", None)
    if version <= 2:
        data.setdefault("tra_learned_temperature", False)
    if version <= 3:
        data.update({k: v for k, v in V4_DEFAULTS.items() if k not in data})
    if version <= 4:
        data.setdefault("tra_threshold_warmup", 0)
    if version <= 5:
        data.setdefault("tra_local_window", 0)
        data.setdefault("tra_dense_window", 0)
        data.setdefault("tra_keep_surrogate", 0.0)
    if version <= 6:
        data = fold_legacy_options(data)
    if version <= 7:
        data = migrate_tra_ablation(data)
    return data


def _is_number(value) -> bool:
    """An int or a float, not a bool (``True`` is an int to Python, never a number in a config)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


V4_DEFAULTS = {"attention_dropout": 0.0, "residual_dropout": True, "init_scheme": "normal", "tra_dense_heads": 0}
INIT_SCHEMES = ("normal", "notebook")


@dataclass
class ModelConfig:
    """Decoder-only language model; ``attention`` picks the attention layer by registry name, and
    ``attention_options`` are that kind's options (a dict becomes the kind's options dataclass)."""

    vocab_size: int = field(default=256, metadata={"help": "token vocabulary size"})
    d_model: int = field(default=128, metadata={"help": "residual stream width"})
    n_layers: int = field(default=2, metadata={"help": "transformer blocks"})
    n_heads: int = field(default=4, metadata={"help": "attention heads (d_model must be a multiple)"})
    attention: str = field(default="tra", metadata={"help": "attention kind, a name from the registry"})
    attention_options: KindOptions | dict = field(
        default_factory=dict,
        metadata={"help": "the kind's options: a dict (unset options take their defaults) or the kind's Options"},
    )
    block_style: str = field(
        default="prenorm",
        metadata={"help": "'prenorm' or 'paper' (x = norm(x); x = x + f(x), as in the TRA notebook)"},
    )
    mlp_ratio: float = field(
        default=2.0, metadata={"help": "SwiGLU hidden width / d_model (the notebook's d -> 4d split in two halves)"}
    )
    mlp_bias: bool = field(default=True, metadata={"help": "biases in the MLP projections"})
    dropout: float = field(
        default=0.0, metadata={"help": "on the embeddings, the MLP hidden layer and (residual_dropout) both branches"}
    )
    residual_dropout: bool = field(
        default=True,
        metadata={"help": "apply dropout to the attention and MLP outputs before they join the residual stream"},
    )
    attention_dropout: float = field(
        default=0.0,
        metadata={
            "help": "dropout on the pre-softmax attention logits (the TRA notebook's placement; training then "
            "materialises the (S, S) logits of every kind)"
        },
    )
    norm_eps: float = field(default=1e-6, metadata={"help": "RMSNorm epsilon"})
    init_std: float = field(default=0.02, metadata={"help": "standard deviation of the initial weights"})
    init_scheme: str = field(
        default="normal",
        metadata={
            "help": "'normal' (N(0, init_std), GPT-2 residual scaling) or 'notebook' (the TRA authors': PyTorch "
            "defaults, embedding U(-0.01, 0.01), head N(0, 0.02))"
        },
    )
    tokenizer: dict | None = field(
        default=None,
        metadata={"help": "the text tokenizer the model reads (its describe(): name, files' hashes), or None"},
    )

    def __post_init__(self):
        """Field-local checks only (the registry's: ``layers.registry.check_model_config``)."""

        def fail(name: str, expected: str):
            raise ValueError(f"ModelConfig.{name} = {getattr(self, name)!r}; expected {expected}")

        for name in ("vocab_size", "d_model", "n_layers", "n_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                fail(name, "a positive integer")
        if self.d_model % self.n_heads:
            fail("d_model", f"a multiple of n_heads = {self.n_heads}")
        if self.block_style not in ("prenorm", "paper"):
            fail("block_style", "'prenorm' or 'paper'")
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
                fail(name, "a probability in [0, 1)")
        if not isinstance(self.residual_dropout, bool):
            fail("residual_dropout", "true or false")
        if self.init_scheme not in INIT_SCHEMES:
            fail("init_scheme", f"one of {INIT_SCHEMES}")
        if not isinstance(self.mlp_bias, bool):
            fail("mlp_bias", "true or false")
        for name in ("mlp_ratio", "norm_eps", "init_std"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value) or value <= 0:
                fail(name, "a finite positive number")
        if int(self.mlp_ratio * self.d_model) < 1:
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

    @classmethod
    def from_dict(cls, data: dict, partial: bool = False) -> ModelConfig:
        """Unknown fields are errors, and so are missing ones unless ``partial``: a saved config that
        lacks a field would otherwise load silently as a different model. Older versions are migrated
        first (``migrate``)."""
        return dataclass_from_dict(cls, migrate(data), required=not partial)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
