"""Config dicts of earlier versions as the current version's: the only code that reads older config formats.

Released formats:

- 0.1 wrote both configs without a version (version 1): the task's parameters as top-level fields of the
  training config, and a model config without a tokenizer, dropout placement, initialisation scheme, or any of
  TRA's later options;
- 0.2 wrote TrainConfig version 5 (its model nested without a version) and ModelConfig version 6, which kept
  every kind's options as flat fields (``tra_*``, ``rope_base``, ``cope_max_pos``, ``gate_bias_init``), in
  ``config.json`` and in Hugging Face folders alike.

Two steps bring them to this version: to 0.2's content (``_model_to_0_2``, ``_train_to_0_2``), then to the
current one (``_flat_to_options`` and ``_options_to_current``; for a training config, no length spread and its
model converted). Every development version between two releases is read by the step to the next release (each
change is a default for a field that did not exist yet, or a move that finds nothing to move), so unreleased
versions need no step of their own. What a released version wrote must be there: a 0.2 config that lost a flat
option field, or holds an option twice, is refused by name.

ModelConfig version 9 changed what some kinds' names mean (their authors' configuration): a config of
version 8 or earlier gets the options that say what its kind computed then (``former_options``: what this
library first ran under that name, ``experiments.methods.first_run_options``). Its run's identity therefore
changes with it, and ``tra upgrade`` moves its record (and its store folder) to the new one.
"""

from __future__ import annotations

import dataclasses

from ..data import TASKS
from ..experiments.methods import first_run_options
from ..layers import ATTENTION_KINDS
from ..models.config import LEGACY_TRA_KINDS
from ..models.config import VERSION as MODEL_VERSION
from ..training.config import VERSION as TRAIN_VERSION
from ..utils.checks import is_int

# 0.2 kept every kind's options as flat fields of the model config: flat name -> option.
FLAT_OPTIONS = {
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
# ModelConfig version 11 made the block's parts (output gate and norm, token shift) options of every kind; earlier
# configs have none of them.
BLOCK_PARTS_10 = {"output_gate": False, "output_norm": False, "kv_shift": False}
# What 0.1's model config lacked, at the value that computes what 0.1 computed.
MODEL_DEFAULTS_0_1 = {
    "tokenizer": None,
    "attention_dropout": 0.0,
    "residual_dropout": True,
    "init_scheme": "normal",
    "tra_learned_temperature": False,
    "tra_dense_heads": 0,
    "tra_threshold_warmup": 0,
    "tra_local_window": 0,
    "tra_dense_window": 0,
    "tra_keep_surrogate": 0.0,
}
# Until 0.3 the TRA ablations were kinds of their own; they are options of "tra" now (LEGACY_TRA_KINDS). The
# options each former kind declared (a flat field of another option had no effect on it).
_TRA_OPTIONS_0_2 = (
    "threshold", "impl", "learned_temperature", "dense_heads", "local_window", "dense_window", "threshold_warmup",
    "keep_surrogate", "gate_bias_init", "threshold_shift", "keep_penalty", "keep_margin",
)  # fmt: skip
DECLARED_0_2 = {
    "tra_keygate": tuple(o for o in _TRA_OPTIONS_0_2 if o not in ("impl", "keep_surrogate")),
    "tra_nothreshold": ("impl", "learned_temperature", "gate_bias_init"),
    "tra_nodistance": tuple(o for o in _TRA_OPTIONS_0_2 if o != "gate_bias_init"),
}


def former_options(kind, options: dict) -> dict:
    """The options whose values a config of version 8 or earlier of ``kind`` (with ``options``) had implicitly: what
    its kind computed before the option existed (``experiments.methods.first_run_options``; empty for a kind that
    computes what it did)."""
    return first_run_options(kind, options) if kind in ATTENTION_KINDS else {}


def _declared_options(attention) -> list[str] | None:
    """The option names the kind ``attention`` declares (as 0.2 had them, for a former TRA ablation)."""
    if attention in DECLARED_0_2:
        return list(DECLARED_0_2[attention])
    kind = ATTENTION_KINDS.get(attention)
    return None if kind is None else kind.options.names()


def _model_to_0_2(data: dict) -> dict:
    """0.1's model config with the fields 0.2 added, at the values that keep 0.1's model (an option that the dict
    already holds in ``attention_options`` is not added again)."""
    options = data.get("attention_options")
    options = options if isinstance(options, dict) else {}
    added = {k: v for k, v in MODEL_DEFAULTS_0_1.items() if FLAT_OPTIONS.get(k) not in options}
    return {**added, **data}


def _flat_to_options(data: dict) -> dict:
    """0.2's model config with its flat option fields moved into ``attention_options`` (each that the kind
    declares: the others had no effect in 0.2). Every option the kind declares must be given once, as a flat field
    or in ``attention_options``: a file that lost one, or holds one in both forms, is refused by name (it would
    otherwise load as another model)."""
    declared = _declared_options(data.get("attention", "tra"))
    given = data.get("attention_options", {})
    if declared is None or not isinstance(given, dict):  # refused by name when the config is built
        flat = {new: data.pop(old) for old, new in FLAT_OPTIONS.items() if old in data}
        return {**data, "attention_options": given or flat}
    twice = [old for old, new in FLAT_OPTIONS.items() if old in data and new in given]
    if twice:
        raise ValueError(
            f"ModelConfig version 6 (tra 0.2): {twice} are given as 0.2's flat fields and in attention_options; "
            "expected each option once"
        )
    lost = [old for old, new in FLAT_OPTIONS.items() if new in declared and old not in data and new not in given]
    if lost:
        raise ValueError(
            f"ModelConfig version 6 (tra 0.2): missing fields {lost}; expected every option field 0.2 wrote for "
            f"attention = {data.get('attention', 'tra')!r}"
        )
    flat = {new: data.pop(old) for old, new in FLAT_OPTIONS.items() if old in data}
    return {**data, "attention_options": {**{k: v for k, v in flat.items() if k in declared}, **given}}


def _options_to_current(data: dict, version: int) -> dict:
    """A version 6 to 9 model config's options as today's: the options a kind gained later at the values that
    compute what the earlier version computed (their defaults, or for a kind whose name means its authors'
    configuration from version 9 on, ``former_options`` of a version 8 or earlier), and a former TRA ablation kind
    as TRA with its option. (Version 10 added options whose defaults compute what version 9 did: ALiBi's
    self_offset, PaTH's w_conv_init_std, Wall's gate_max.)"""
    options, kind = data.get("attention_options", {}), data.get("attention", "tra")
    former = kind in LEGACY_TRA_KINDS
    if former:
        kind = "tra"
    if not isinstance(options, dict):  # refused by ModelConfig, by name
        return {**data, "attention": kind}
    if former:
        options = {**options, **LEGACY_TRA_KINDS[data["attention"]]}
    if kind in ATTENTION_KINDS:
        meant = former_options(kind, options) if version < 9 else {}
        options = {**ATTENTION_KINDS[kind].options().to_dict(), **meant, **options}
    return {**data, "attention": kind, "attention_options": options}


def upgrade_model_config(data: dict) -> dict:
    """A model config dict of any earlier version as a current one (with its version); a current one as it is."""
    data, version = _versioned("ModelConfig", data, MODEL_VERSION)
    if version < 6:
        data = _model_to_0_2(data)
    if version <= 6:
        data = _flat_to_options(data)
    if version < MODEL_VERSION:
        data = _options_to_current(data, version)
    if version < 11:
        data = {**BLOCK_PARTS_10, **data}
    return {**data, "version": MODEL_VERSION}


def _train_to_0_2(data: dict, version: int) -> dict:
    """0.1's training config as 0.2's: the task's parameters into ``task_args``, the fields 0.2 added at the values
    that keep 0.1's run, and the threshold warm-up (a training field until 0.2's development) into the model."""
    if version == 1 and data.get("task") in TASKS:
        parameters = [f.name for f in dataclasses.fields(TASKS[data["task"]])]
        data.setdefault("task_args", {name: data.pop(name) for name in parameters if name in data})
    data = {"grad_accum": 1, "compile": False, "fit_accuracy": 0.0, **data}
    warmup = data.pop("tra_threshold_warmup", 0)
    if warmup and isinstance(data.get("model"), dict):
        data["model"] = {**data["model"], "tra_threshold_warmup": warmup}
    return data


def upgrade_train_config(data: dict) -> dict:
    """A training config dict of any earlier version as a current one (with its version, and its model's)."""
    data, version = _versioned("TrainConfig", data, TRAIN_VERSION)
    if version < 5:
        data = _train_to_0_2(data, version)
    if version < TRAIN_VERSION:
        data = {"length_spread": 0.0, **data}
    if isinstance(data.get("model"), dict):  # (a current one is left as it is)
        data["model"] = upgrade_model_config(data["model"])
    return {**data, "version": TRAIN_VERSION}


def _versioned(name: str, data, current: int) -> tuple[dict, int]:
    """(a copy of ``data`` without its version, the version: 1 when absent), or a ValueError naming ``name``."""
    if not isinstance(data, dict):
        raise ValueError(f"{name}: got {type(data).__name__}; expected a JSON object of fields")
    data = dict(data)
    version = data.pop("version", 1)
    if not is_int(version) or not 1 <= version <= current:
        raise ValueError(f"{name}: version = {version!r}; expected 1 to {current} (a newer file needs a newer tra)")
    return data, version
