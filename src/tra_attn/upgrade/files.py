"""``tra upgrade PATH``: every file of an earlier version under PATH, converted in place to the current one.

What it converts, wherever it is under PATH (a run folder, a checkpoint, a ``save_pretrained`` or Hugging Face
folder, a run store, a results folder, or one file):

- ``train_config.json`` (a run's and each checkpoint's) and ``config.json`` (a model's; a Hugging Face folder's
  model fields), through ``configs.py``;
- a run record (``<run>.json`` of an evidence folder, ``record.json`` of a store's run): its config, and where
  the conversion changes the run's identity (ModelConfig version 9: a kind's name means its authors'
  configuration, an older config says what it computed instead), the record moves to the new one (its file, or
  the store's run folder);
- a results folder of 0.2 (``results.jsonl``, ``sweep.jsonl``): its runs' records, written to ``PATH/runs/``.

Each file is replaced atomically and only if it changes, so an interrupted upgrade leaves every file either as
it was or converted, and running it again converts the rest. Weights need no conversion: every release's
tensors load under the same names.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..experiments.identity import run_id
from ..experiments.store import RECORD_NAME, Evidence, Record
from ..models.config import LEGACY_TRA_KINDS, ModelConfig
from ..models.io import HF_MODEL_TYPE
from ..training.config import TrainConfig
from ..utils.atomic import atomic_write_text
from .configs import FLAT_OPTIONS, former_options, upgrade_model_config, upgrade_train_config
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
    model = {name: data[name] for name in [*MODEL_FIELDS, *FLAT_OPTIONS] if name in data}
    if old:
        current = upgrade_model_config(model)  # no version: read as 0.1's, every later field kept as it is
    elif _before_version_9(data):
        current = upgrade_model_config({**model, "version": 8})
    else:
        return data
    rest = {name: value for name, value in data.items() if name not in model}
    return {**rest, **{name: current[name] for name in MODEL_FIELDS}}


def _before_version_9(data: dict) -> bool:
    """Whether a Hugging Face config's options were written before ModelConfig version 9: they lack an option that
    version 9 added to say what its kind computed before (``former_options``)."""
    options, kind = data.get("attention_options"), data.get("attention")
    if not isinstance(options, dict) or not isinstance(kind, str):
        return False
    return any(name not in options for name in former_options(kind, options))


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


def upgrade_file(path: Path, named: bool = True, moves: list[tuple[Path, Path]] | None = None) -> Path | None:
    """Convert one config, or run record, file; the file written (None: nothing changed). Other JSON files are left
    alone. ``moves`` collects the store run folders whose identity changed (``_upgrade_record``)."""
    data = _read(path)
    kind = None if data is None else kind_of(path, data, named)
    if kind == "record":
        return _upgrade_record(path, Record.from_dict(data, path), moves)
    convert = {"train": upgrade_train_config, "model": upgrade_model_config, "hf": hf_model_config}.get(kind)
    return path if convert is not None and _write(path, data, convert(data)) else None


def _upgrade_record(path: Path, record: Record, moves: list[tuple[Path, Path]] | None) -> Path | None:
    """Convert a run record's config; a record whose identity changed with it (a kind whose name now means its
    authors' configuration) moves to its new identity: an evidence folder's ``<run>.json`` at once, a store's run
    folder (``<run>/record.json``) after the walk (appended to ``moves``). The file written, or None."""
    config = TrainConfig.from_dict(upgrade_train_config(record.config))
    if config.to_dict() == record.config:
        return None
    upgraded = dataclasses.replace(record, run=run_id(config), config=config.to_dict())
    if path.name == RECORD_NAME:
        atomic_write_text(path, upgraded.to_text())
        if upgraded.run != record.run and moves is not None:
            moves.append((path.parent, path.parent.with_name(upgraded.run)))
        return path
    target = path.with_name(f"{upgraded.run}.json")
    if target != path and target.is_file():
        present = Record.from_dict(_read(target), target)
        if present.config != upgraded.config:
            raise ValueError(f"tra upgrade: {path} is run {upgraded.run} now, and {target} holds another config; "
                             "expected one record per run")  # fmt: skip
        upgraded = present.merged(upgraded)
    atomic_write_text(target, upgraded.to_text())
    if target != path:
        path.unlink()
    return target


def _move_run_folders(moves: list[tuple[Path, Path]]) -> list[Path]:
    """Rename each store run folder to its new identity; a folder already there is refused by name (two trainings
    of one run: keep the one you want and run ``tra upgrade`` again)."""
    moved = []
    for old, new in moves:
        if new.exists():
            raise ValueError(f"tra upgrade: {old} is run {new.name} now, and {new} exists; expected one folder per run "
                             "(remove one of them and run tra upgrade again)")  # fmt: skip
        old.rename(new)
        moved.append(new)
    return moved


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
        moves: list[tuple[Path, Path]] = []
        written = upgrade_file(path, named=False, moves=moves)
        return [new / path.name for new in _move_run_folders(moves)] or ([written] if written else [])
    moves = []
    written = [w for f in sorted(path.rglob("*.json")) if f.is_file() and (w := upgrade_file(f, moves=moves))]
    for old, new in moves:  # the files written inside a moved run folder, at their new place
        written = [new / f.relative_to(old) if f.is_relative_to(old) else f for f in written]
    _move_run_folders(moves)
    if path.is_dir() and any((path / name).is_file() for name in ROW_FILES):
        evidence = Evidence(path / "runs")
        for record in folder_records(path):
            if evidence.get(record.run) is None:
                evidence.put(record)
                written.append(evidence.path(record.run))
    return written
