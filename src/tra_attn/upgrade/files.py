"""``tra upgrade PATH``: every file of an earlier version under PATH, converted in place to the current one.

What it converts, wherever it is under PATH (a run folder, a checkpoint, a ``save_pretrained`` or Hugging Face
folder, a run store, a results folder, or one file):

- ``train_config.json`` (a run's and each checkpoint's) and ``config.json`` (a model's; a Hugging Face folder's
  model fields), through ``configs.py``;
- a run record (``<run>.json`` of an evidence folder, ``record.json`` of a store's run): its config;
- a results folder of 0.2 (``results.jsonl``, ``sweep.jsonl``): its runs' records, written to ``PATH/runs/``.

Each file is replaced atomically and only if it changes, so an interrupted upgrade leaves every file either as
it was or converted, and running it again converts the rest. Weights need no conversion: every release's
tensors load under the same names.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..experiments.store import RECORD_NAME, Evidence, Record
from ..models.config import LEGACY_TRA_KINDS, ModelConfig
from ..models.io import HF_MODEL_TYPE
from ..training.config import TrainConfig
from ..utils.atomic import atomic_write_text
from .configs import FLAT_OPTIONS, upgrade_model_config, upgrade_train_config
from .rows import ROW_FILES, folder_records

MODEL_FIELDS = [f.name for f in dataclasses.fields(ModelConfig)]


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err}); expected a config or a run record") from None
    return data if isinstance(data, dict) else None


def _write(path: Path, before: dict, after: dict) -> bool:
    """Replace ``path`` with ``after`` if it differs from ``before``; whether it did."""
    if after == before:
        return False
    atomic_write_text(path, json.dumps(after, indent=2, sort_keys=True) + "\n")
    return True


def hf_model_config(data: dict) -> dict:
    """A Hugging Face folder's config with its model fields converted (it stores them without a version: a folder
    of 0.2 holds flat option fields, one of 0.3's development a former TRA ablation kind)."""
    old = any(name in data for name in FLAT_OPTIONS) or data.get("attention") in LEGACY_TRA_KINDS
    if not old:
        return data
    model = {name: data[name] for name in [*MODEL_FIELDS, *FLAT_OPTIONS] if name in data}
    current = upgrade_model_config(model)  # no version: read as 0.1's, every later field kept as it is
    rest = {name: value for name, value in data.items() if name not in model}
    return {**rest, **{name: current[name] for name in MODEL_FIELDS}}


def kind_of(path: Path, data: dict, named: bool) -> str | None:
    """What a JSON file holds: "train", "model", "hf" or "record" (None: not a file of tra). In a folder only files
    by their names are read (``named``); a file given by itself is read by what it holds."""
    if data.get("model_type") == HF_MODEL_TYPE:
        return "hf" if path.name == "config.json" or not named else None
    if {"run", "config", "validation"} <= set(data):
        return "record" if not named or path.name == RECORD_NAME or path.stem == data["run"] else None
    if "architectures" in data or "model_type" in data:  # another library's config
        return None
    if path.name == "train_config.json" or (not named and ("model" in data or "task" in data)):
        return "train"
    if {"attention", "d_model"} <= set(data) and (path.name == "config.json" or not named):  # every version has both
        return "model"
    return None


def upgrade_file(path: Path, named: bool = True) -> bool:
    """Convert one config, or run record, file; whether it changed. Other JSON files are left alone."""
    data = _read(path)
    kind = None if data is None else kind_of(path, data, named)
    if kind == "train":
        return _write(path, data, upgrade_train_config(data))
    if kind == "model":
        return _write(path, data, upgrade_model_config(data))
    if kind == "hf":
        return _write(path, data, hf_model_config(data))
    if kind == "record":
        record = Record.from_dict(data, path)
        config = TrainConfig.from_dict(upgrade_train_config(record.config)).to_dict()
        if config == record.config:
            return False
        atomic_write_text(path, dataclasses.replace(record, config=config).to_text())
        return True
    return False


def upgrade(path: str | Path) -> list[Path]:
    """Convert every file of an earlier version under ``path`` (see the module's docstring); the files written."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"tra upgrade: {path} does not exist; expected a run, model, store or results folder")
    if path.is_file():
        data = _read(path) if path.suffix == ".json" else None
        if data is None or kind_of(path, data, named=False) is None:
            raise ValueError(f"tra upgrade: {path} is not a config or run record of tra; expected a JSON file of "
                             "one, or a folder")  # fmt: skip
        return [path] if upgrade_file(path, named=False) else []
    written = [f for f in sorted(path.rglob("*.json")) if f.is_file() and upgrade_file(f)]
    if path.is_dir() and any((path / name).is_file() for name in ROW_FILES):
        evidence = Evidence(path / "runs")
        for record in folder_records(path):
            if evidence.get(record.run) is None:
                evidence.put(record)
                written.append(evidence.path(record.run))
    return written
