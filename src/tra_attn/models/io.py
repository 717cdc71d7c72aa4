"""Saving and loading models: config.json + model.safetensors in a directory, written atomically as a pair.

Loading also reads the Hugging Face form of a model (``tra convert --to hf``: the same tensors under
``model.``, and the config's fields among Hugging Face's own), so that every command that takes a model
takes that folder too, without needing ``transformers``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..utils.atomic import atomic_directory, atomic_write, atomic_write_text, make_directory
from ..utils.dataclass_io import OldVersion
from .config import LEGACY_TRA_KINDS, VERSION, ModelConfig

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
HF_MODEL_TYPE = "tra"  # config.json's model_type in a Hugging Face folder (tra_attn.hf.TRAConfig)
# config.json's model_type, and the field naming the family, of a transformers model converted by add_attention
# (tra_attn.hf.converted; tra upgrade converts folders saved before)
CONVERTED_MODEL_TYPE, CONVERTED_BASE_FIELD = "converted_by_tra_attn", "base_model_type"
HF_WEIGHTS_PREFIX = "model."  # TRAForCausalLM holds the TransformerLM as .model: its tensors' names start so


def save_pretrained(model, directory: str | os.PathLike, state_dict: dict | None = None) -> None:
    """Write config.json and model.safetensors so that a crash never leaves the weights of one model with
    the config of another: over a saved model, the folder is written beside and swapped in as a whole
    (``atomic_directory``, which keeps the folder's other files), and so is a new folder; into an existing
    folder without a model, each file is written atomically (a crash leaves at most the weights, which loading
    refuses without a config).

    ``state_dict`` replaces ``model.state_dict()`` (e.g. the full weights gathered from a sharded model).
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        make_directory(directory, "save_pretrained:")  # the error naming the file
    state_dict = model.state_dict() if state_dict is None else state_dict
    state = {name: t.detach().contiguous().cpu() for name, t in state_dict.items()}

    def write(folder: Path) -> None:
        atomic_write(folder / WEIGHTS_NAME, lambda path: save_file(state, str(path)))
        atomic_write_text(folder / CONFIG_NAME, model.config.to_json())

    if directory.is_dir() and not any((directory / name).exists() for name in (CONFIG_NAME, WEIGHTS_NAME)):
        write(directory)  # a folder without a model (a checkpoint being written): nothing to mix with
    else:
        atomic_directory(directory, write)


def nonfinite_tensors(state: dict[str, torch.Tensor]) -> list[str]:
    """The names of the floating-point tensors of ``state`` holding a NaN or an infinity."""
    return [name for name, t in state.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]


def check_finite(state: dict[str, torch.Tensor], where) -> None:
    """A ValueError naming ``where`` and the tensors if any weight is NaN or infinite: a model whose training
    diverged predicts nothing, and evaluating, converting or sampling it would only hide that."""
    bad = nonfinite_tensors(state)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise ValueError(
            f"{where} holds non-finite weights (NaN or inf) in {shown}; expected finite weights (a run that "
            "diverged: use a checkpoint from before, or train again with a lower learning rate)"
        )


# What a stored tensor may be read as: its own dtype, or a narrower float widened exactly (a model saved in half
# precision loads into float32). Integers, booleans and wider floats are never cast: they are not this model's.
EXACT_WIDENINGS = {
    torch.float32: (torch.float16, torch.bfloat16),
    torch.float64: (torch.float16, torch.bfloat16, torch.float32),
}

_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64,
    "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}  # fmt: skip


def stored_specs(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """(dtype, shape) of every tensor of a safetensors file, read from its header alone (no weights loaded); the
    dtype as torch names it where it has one (``torch.int64``), else safetensors' name (``F8_E4M3``)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as stored:
        specs = {}
        for name in stored.keys():  # noqa: SIM118  (safe_open is not a mapping)
            tensor = stored.get_slice(name)
            dtype = tensor.get_dtype()
            specs[name] = (str(_SAFETENSORS_DTYPES.get(dtype, dtype)), tuple(tensor.get_shape()))
    return specs


def check_weights(
    stored: dict[str, tuple[str, tuple[int, ...]]], expected: dict[str, torch.Tensor], where: str
) -> None:
    """A ValueError naming ``where`` unless ``stored`` ((dtype, shape) per name) are exactly the tensors of
    ``expected`` (a model's state dict): none missing, none unexpected, each of its shape and of its dtype or one
    ``EXACT_WIDENINGS`` reads exactly. Called before anything is copied: ``load_state_dict`` would cast integers
    (and ``transformers`` also fill missing tensors with random values)."""
    missing = sorted(set(expected) - set(stored))
    unexpected = sorted(set(stored) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{where} does not hold the model's tensors (missing: {missing or 'none'}; unexpected: "
            f"{unexpected or 'none'}); expected exactly the {len(expected)} tensors of the config's model"
        )
    for name, want in expected.items():
        dtype, shape = stored[name]
        readable = [str(want.dtype)] + [str(d) for d in EXACT_WIDENINGS.get(want.dtype, ())]
        if shape != tuple(want.shape) or dtype not in readable:
            raise ValueError(
                f"{where}: {name} is {dtype} of shape {shape}; expected {' or '.join(readable)} of shape "
                f"{tuple(want.shape)}, as the config's model (weights are never cast from integers or narrowed)"
            )


def state_specs(state: dict[str, torch.Tensor]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """(dtype, shape) of every tensor of ``state``, as ``stored_specs`` gives them for a file."""
    return {name: (str(t.dtype), tuple(t.shape)) for name, t in state.items()}


def read_config(directory: Path) -> tuple[ModelConfig, bool]:
    """(the ModelConfig of a saved model, whether the folder is a Hugging Face one); ValueError naming the file
    if it is missing or invalid. A Hugging Face config's own fields (model_type, architectures, ...) are dropped."""
    path = Path(directory) / CONFIG_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as err:
        raise ValueError(f"from_pretrained: {path} is not a valid config ({err})") from err
    hf = isinstance(data, dict) and data.get("model_type") == HF_MODEL_TYPE
    if hf:  # ModelConfig's fields, without a version: a Hugging Face folder's are the current ones, unless old
        check_hf_fields(data, path)
        data = {f.name: data[f.name] for f in dataclasses.fields(ModelConfig) if f.name in data}
        data["version"] = VERSION
    return ModelConfig.from_dict(data, where=path), hf


# What a Hugging Face config written before ModelConfig version 8 holds: 0.2's flat option fields.
LEGACY_HF_FIELDS = ("tra_threshold", "tra_impl", "tra_learned_temperature", "tra_dense_heads", "tra_local_window",
                    "tra_dense_window", "tra_threshold_warmup", "tra_keep_surrogate", "rope_base", "cope_max_pos",
                    "gate_bias_init")  # fmt: skip


def check_hf_fields(data: dict, where) -> None:
    """An ``OldVersion`` naming ``tra upgrade`` if a Hugging Face config's model fields are of an earlier version
    (0.2's flat option fields, or a former TRA ablation kind)."""
    old = [name for name in LEGACY_HF_FIELDS if name in data]
    if old or data.get("attention") in LEGACY_TRA_KINDS:
        what = f"the flat option fields {old}" if old else f"the former kind {data['attention']!r}"
        folder = Path(where).parent if isinstance(where, Path) else "FOLDER"
        raise OldVersion(
            f"{where}: a Hugging Face config written by an earlier version of tra ({what}); convert its folder with "
            f"`tra upgrade {folder}`"
        )


def load_pretrained(
    cls, directory: str | os.PathLike, device: str | torch.device = "cpu", config: ModelConfig | None = None
):
    """Rebuild a model saved by ``save_pretrained`` (or in Hugging Face's form); fails clearly on a missing or
    corrupt directory, or on non-finite weights (every command that evaluates, samples, converts or resumes a
    model reads it here).

    ``config`` replaces the saved config.json (whose weights must fit it): a training run's own config is
    authoritative for the model it resumes.
    """
    directory = Path(directory)
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if not (directory / name).is_file():
            raise ValueError(
                f"from_pretrained: {directory / name} does not exist; expected a "
                f"directory written by save_pretrained ({CONFIG_NAME} + {WEIGHTS_NAME})"
            )
    config, hf = read_config(directory) if config is None else (config, False)
    try:
        state = load_file(str(directory / WEIGHTS_NAME), device="cpu")
    except Exception as err:  # safetensors raises its own error types for truncated files
        raise ValueError(f"from_pretrained: {directory / WEIGHTS_NAME} is corrupt ({err})") from err
    if hf:  # names without the wrapper's prefix; any other name stays, and load_state_dict refuses it
        state = {name.removeprefix(HF_WEIGHTS_PREFIX): tensor for name, tensor in state.items()}
    model = cls(config)
    if {t.dtype for t in state.values() if t.is_floating_point()} == {torch.float64}:
        model = model.double()  # saved from model.double(): it loads as it was saved (never narrowed)
    where = f"from_pretrained: weights do not match the config: {directory / WEIGHTS_NAME}"
    check_weights(state_specs(state), model.state_dict(), where)
    check_finite(state, f"from_pretrained: {directory / WEIGHTS_NAME}")
    model.load_state_dict(state, strict=True)
    return model.to(device)
