"""Conversion between the library's saved models and the Hugging Face format, both ways, exactly.

Native: ``config.json`` (ModelConfig) + ``model.safetensors`` (TransformerLM's state dict), as written
by ``save_pretrained``, a run or a checkpoint. Hugging Face: ``config.json`` (TRAConfig, model_type
"tra") + ``model.safetensors`` (the same tensors under ``model.``) + the tokenizer's files and a
generation config. The weights are copied bit for bit, and must be finite (a diverged model is refused:
``check_finite``, as every command that reads a model does); from Hugging Face, a missing, unexpected or
mis-shaped tensor, an integer one, or a config value of the wrong type is refused. The output directory is
written complete in a temporary folder (a leftover of a killed conversion is removed by the next one) and then
renamed into place with the permissions of the user's umask, so a failure never leaves half a model behind.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from safetensors.torch import load_file

from ..models import WEIGHTS_NAME, TransformerLM
from ..models.io import check_finite
from ..training.checkpoint import resolve_checkpoint
from ..utils.atomic import atomic_directory
from .configuration import MODEL_TYPE, TRAConfig
from .modeling import TRAForCausalLM
from .tokenization import TRAByteTokenizer, hf_tokenizer


def _write_directory(out: str | os.PathLike, write) -> Path:
    """Call ``write(tmp)`` on a fresh folder next to ``out``, then rename it to ``out`` (which must not exist,
    or be empty), with the permissions of the user's umask."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"convert: {out} exists and is not an empty directory; expected a new output directory")
    return atomic_directory(out, write, keep_others=False)


def to_hf(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """A native model (a save_pretrained directory, a run or a checkpoint) as a Hugging Face directory.

    The folder also holds ``remote_code.py`` and names its classes in ``auto_map``: a process that has not
    imported ``tra_attn`` (``lm_eval --model hf``) loads it with ``trust_remote_code=True``, running only
    the installed package's code.
    """
    model = TransformerLM.from_pretrained(resolve_checkpoint(source))
    config = model.config
    hf_model = TRAForCausalLM(TRAConfig.from_model_config(config, auto_map=_auto_map("config")))  # + special ids
    hf_model.model.load_state_dict(model.state_dict(), strict=True)

    def write(tmp: Path) -> None:
        hf_model.save_pretrained(tmp)
        shutil.copyfile(Path(__file__).with_name(REMOTE_CODE), tmp / REMOTE_CODE)
        if config.tokenizer:
            tokenizer = hf_tokenizer(config.tokenizer["name"])
            tokenizer.save_pretrained(tmp)
            if isinstance(tokenizer, TRAByteTokenizer):  # GPT-2's tokenizer is transformers' own
                settings = tmp / "tokenizer_config.json"
                written = json.loads(settings.read_text(encoding="utf-8"))
                settings.write_text(json.dumps({**written, "auto_map": _auto_map("tokenizer")}, indent=2) + "\n")

    return _write_directory(out, write)


REMOTE_CODE = "remote_code.py"  # in a Hugging Face folder: the auto_map classes (hf/remote_code.py)


def _auto_map(what: str) -> dict:
    """The ``auto_map`` of a Hugging Face folder's config ('config') or tokenizer config ('tokenizer')."""
    module = REMOTE_CODE.removesuffix(".py")
    if what == "config":
        return {"AutoConfig": f"{module}.TRAConfig", "AutoModelForCausalLM": f"{module}.TRAForCausalLM"}
    return {"AutoTokenizer": [f"{module}.TRAByteTokenizer", None]}


def to_native(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """A Hugging Face directory written by ``to_hf`` (or ``TRAForCausalLM.save_pretrained``) as a native one.

    The weights are read as stored and must be exactly the native model's: every tensor present, none
    unknown, each of the model's shape and floating-point dtype (``transformers`` would fill a missing
    tensor with random values and cast the others); a config value of the wrong type is refused too.
    """
    source = Path(source)
    config_path = source / "config.json"
    try:
        model_type = json.loads(config_path.read_text(encoding="utf-8")).get("model_type")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as err:
        raise ValueError(
            f"convert: cannot read {config_path} ({err}); expected a Hugging Face model directory"
        ) from None
    if model_type != MODEL_TYPE:
        raise ValueError(
            f"convert: {config_path} has model_type = {model_type!r}; expected {MODEL_TYPE!r} (a directory written "
            "by `tra convert --to hf`; a native model converts with --to hf)"
        )
    try:
        config = TRAConfig.from_pretrained(source).to_model_config()
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ValueError(f"convert: {config_path} is not a valid TRAConfig ({err})") from None
    weights_path = source / WEIGHTS_NAME
    try:
        stored = load_file(str(weights_path), device="cpu")
    except Exception as err:  # a missing file, or safetensors' own errors for a truncated one
        raise ValueError(f"convert: cannot read {weights_path} ({err}); expected the model's weights") from None
    model = TransformerLM(config)
    state = _native_state(stored, model.state_dict(), weights_path)
    check_finite(state, f"convert: {source}")
    model.load_state_dict(state, strict=True)
    return _write_directory(out, model.save_pretrained)


def _native_state(stored: dict, expected: dict, path: Path) -> dict:
    """The stored tensors under their native names (without ``model.``), or a ValueError naming every tensor
    that is missing or unexpected, and the first one of the wrong shape or dtype."""
    prefix = f"{TRAForCausalLM.base_model_prefix}."
    state = {name.removeprefix(prefix): tensor for name, tensor in stored.items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"convert: {path} does not hold the model's tensors (missing: {missing or 'none'}; unexpected: "
            f"{[prefix + name for name in unexpected] or 'none'}); expected exactly the {len(expected)} tensors "
            f"of the config's model under {prefix!r}"
        )
    for name, want in expected.items():
        got = state[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ValueError(
                f"convert: {path}: {prefix}{name} is {got.dtype} of shape {tuple(got.shape)}; expected "
                f"{want.dtype} of shape {tuple(want.shape)} as the config's model (weights are copied exactly, "
                "never cast or filled in)"
            )
    return state
