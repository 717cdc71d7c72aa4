"""Conversion between the library's saved models and the Hugging Face format, both ways, exactly.

Native: ``config.json`` (ModelConfig) + ``model.safetensors`` (TransformerLM's state dict), as written
by ``save_pretrained``, a run or a checkpoint. Hugging Face: ``config.json`` (TRAConfig, model_type
"tra") + ``model.safetensors`` (the same tensors under ``model.``) + the tokenizer's files and a
generation config. The weights are copied bit for bit, and must be finite (a diverged model is refused:
``check_finite``, as every command that reads a model does). The output directory is written complete in a
temporary folder and then renamed into place, so a failure never leaves half a model behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..data.text.tokenizers import GPT2_ENDOFTEXT_ID
from ..models import TransformerLM
from ..models.io import check_finite
from ..training.checkpoint import resolve_checkpoint
from .configuration import MODEL_TYPE, TRAConfig
from .modeling import TRAForCausalLM
from .tokenization import hf_tokenizer


def _write_directory(out: str | os.PathLike, write) -> Path:
    """Call ``write(tmp)`` on a fresh folder next to ``out``, then rename it to ``out`` (which must not exist)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"convert: {out} exists and is not an empty directory; expected a new output directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write(tmp)
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def to_hf(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """A native model (a save_pretrained directory, a run or a checkpoint) as a Hugging Face directory."""
    model = TransformerLM.from_pretrained(resolve_checkpoint(source))
    config = model.config
    special = {}
    if config.tokenizer and config.tokenizer["name"] == "gpt2":
        special = {"bos_token_id": GPT2_ENDOFTEXT_ID, "eos_token_id": GPT2_ENDOFTEXT_ID}
    hf_model = TRAForCausalLM(TRAConfig.from_model_config(config, **special))
    hf_model.model.load_state_dict(model.state_dict(), strict=True)

    def write(tmp: Path) -> None:
        hf_model.save_pretrained(tmp)
        if config.tokenizer:
            hf_tokenizer(config.tokenizer["name"]).save_pretrained(tmp)

    return _write_directory(out, write)


def to_native(source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """A Hugging Face directory written by ``to_hf`` (or ``TRAForCausalLM.save_pretrained``) as a native one."""
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
        hf_model = TRAForCausalLM.from_pretrained(source)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ValueError(f"convert: {source} is not a TRAForCausalLM directory ({err})") from err
    check_finite(hf_model.model.state_dict(), f"convert: {source}")
    return _write_directory(out, hf_model.model.save_pretrained)
