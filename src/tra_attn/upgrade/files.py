"""``tra upgrade PATH``: every file of an earlier version under PATH, converted in place to the current one.

What it converts, wherever it is under PATH (a run folder, a checkpoint, a ``save_pretrained`` or Hugging Face
folder, a run store, a results folder, or one file):

- ``train_config.json`` (a run's and each checkpoint's) and ``config.json`` (a model's; a Hugging Face folder's
  model fields), through ``configs.py``;
- a run record (``<run>.json`` of an evidence folder, ``record.json`` of a store's run): its config, and where
  the conversion changes the run's identity (ModelConfig version 9: a kind's name means its authors'
  configuration, an older config says what it computed instead), the record moves to the new one (its file, or
  the store's run folder);
- a results folder of 0.2 (``results.jsonl``, ``sweep.jsonl``): its runs' records, written to ``PATH/runs/``;
- the ``config.json`` of a transformers model converted by ``add_attention`` and saved before such folders said so
  (``hf/converted.py``): a plain ``from_pretrained`` loaded it as the family's model without its kind.

Every file is read and every conversion checked before anything is written (a folder converts all or nothing);
files of other programs are left alone. Each file is replaced atomically and only if it changes, so an interrupted
upgrade leaves every file either as it was or converted, and running it again converts the rest. Weights need no
conversion: every release's tensors load under the same names.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..experiments.identity import run_id
from ..experiments.store import RECORD_NAME, Evidence, Record
from ..models.config import LEGACY_TRA_KINDS, ModelConfig, missing_options
from ..models.config import VERSION as MODEL_VERSION
from ..models.io import CONVERTED_BASE_FIELD, CONVERTED_MODEL_TYPE, HF_MODEL_TYPE
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


def hf_model_config(data: dict) -> dict:
    """A Hugging Face folder's config with its model fields converted (it stores them without a version: a folder
    of 0.2 holds flat option fields, one of 0.3's development a former TRA ablation kind)."""
    old = any(name in data for name in FLAT_OPTIONS) or data.get("attention") in LEGACY_TRA_KINDS
    model = {name: data[name] for name in [*MODEL_FIELDS, *FLAT_OPTIONS] if name in data}
    if old:
        current = upgrade_model_config(model)  # no version: read as 0.1's, every later field kept as it is
    elif _before_version_9(data):
        current = upgrade_model_config({**model, "version": 8})
    elif missing_options(data):  # written by version 9: the options version 10 added, at their defaults
        current = upgrade_model_config({**model, "version": 9})
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


# The config keys of add_attention's kinds (``hf/attach.py``: CONVERTED, a test holds them equal), named here
# without importing transformers.
CONVERTED_KEYS = ("tra", "fox_attention", "alibi_attention")


def _converted_before(data: dict) -> bool:
    """Whether a transformers config is a model converted by ``add_attention`` saved before such folders said so
    (the family's own ``model_type``, which a plain ``from_pretrained`` loaded without the kind)."""
    kind = data.get("model_type")
    return isinstance(kind, str) and kind not in (CONVERTED_MODEL_TYPE, HF_MODEL_TYPE) and any(
        isinstance(data.get(key), dict) for key in CONVERTED_KEYS)  # fmt: skip


def as_converted(data: dict) -> dict:
    """A converted model's config as folders say it now (``hf/converted.py``): one saved before, with the
    family's ``model_type``, gets ``converted_by_tra_attn`` and the family's type as ``base_model_type``."""
    if not _converted_before(data):
        return data
    return {**data, "model_type": CONVERTED_MODEL_TYPE, CONVERTED_BASE_FIELD: data["model_type"]}


def kind_of(path: Path, data: dict, named: bool) -> str | None:
    """What a JSON file holds: "train", "model", "hf", "converted" (a transformers model converted by
    ``add_attention``) or "record" (None: not a file of tra). In a folder only files by their names are read
    (``named``); a file given by itself is read by what it holds."""
    if data.get("model_type") == HF_MODEL_TYPE:
        return "hf" if path.name == "config.json" or not named else None
    if {"run", "config", "validation"} <= set(data):
        return "record" if not named or path.name == RECORD_NAME or path.stem == data["run"] else None
    if data.get("model_type") == CONVERTED_MODEL_TYPE or _converted_before(data):
        return "converted" if path.name == "config.json" or not named else None
    if "architectures" in data or "model_type" in data:  # another library's config
        return None
    if path.name == "train_config.json" or (not named and ("model" in data or "task" in data)):
        return "train"
    if {"attention", "d_model"} <= set(data) and (path.name == "config.json" or not named):  # every version has both
        return "model"
    return None


@dataclass
class Change:
    """A file to write (``path``, ``text``), and the file it replaces if it moved (a record whose identity changed)."""

    path: Path
    text: str
    replaces: Path | None = None

    def apply(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)  # a results folder's new runs/
        atomic_write_text(self.path, self.text)
        if self.replaces is not None and self.replaces != self.path:
            self.replaces.unlink()
        return self.path


@dataclass
class Plan:
    """What an upgrade will do, decided before anything is written (a folder converts all or nothing): the files of
    tra found, their changes, the store run folders to rename, and the files left alone (path, why)."""

    found: list[Path] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    moves: list[tuple[Path, Path]] = field(default_factory=list)
    left_alone: list[tuple[Path, str]] = field(default_factory=list)


def _dump(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _converted(kind: str, path: Path, data: dict) -> dict:
    """``data`` converted; what changes is checked as the current version reads it: a file is stamped current only
    if it is a valid one (a 0.1 config naming an unknown kind, ``"steps": "many"``: a ValueError naming the file)."""
    if kind == "converted":
        return as_converted(data)
    if kind == "hf":
        converted = hf_model_config(data)
        model = {**{name: converted[name] for name in MODEL_FIELDS if name in converted}, "version": MODEL_VERSION}
    else:
        converted = (upgrade_train_config if kind == "train" else upgrade_model_config)(data)
        model = converted
    if converted != data:
        (TrainConfig if kind == "train" else ModelConfig).from_dict(model, where=path)
    return converted


def plan_file(path: Path, plan: Plan, named: bool = True) -> None:
    """Add to ``plan`` what converting one config or run record file takes. In a folder (``named``), a JSON file
    of another program, or one that is not JSON, is left alone (noted) unless its name is one tra writes."""
    try:
        data = _read(path)
    except ValueError as err:
        if not named or path.name in ("train_config.json", RECORD_NAME):
            raise
        plan.left_alone.append((path, str(err).removeprefix(f"{path}: ").split(";")[0]))
        return
    kind = None if data is None else kind_of(path, data, named)
    if kind is None:
        return
    plan.found.append(path)
    try:
        if kind == "record":
            change = _record_change(path, Record.from_dict(data, path), plan.moves)
        else:
            converted = _converted(kind, path, data)
            change = Change(path, _dump(converted)) if converted != data else None
    except ValueError as err:
        if str(path) in str(err):
            raise
        raise ValueError(f"tra upgrade: {path}: {err}; nothing was converted") from None
    if change is not None:
        plan.changes.append(change)


def _record_change(path: Path, record: Record, moves: list[tuple[Path, Path]]) -> Change | None:
    """A run record's config converted; a record whose identity changed with it (a kind whose name now means its
    authors' configuration) moves to its new identity: an evidence folder's ``<run>.json`` to ``<new run>.json``, a
    store's run folder (``<run>/record.json``) after the others (appended to ``moves``). None: nothing changes."""
    config = TrainConfig.from_dict(upgrade_train_config(record.config), where=path)
    if config.to_dict() == record.config:
        return None
    upgraded = dataclasses.replace(record, run=run_id(config), config=config.to_dict())
    if path.name == RECORD_NAME:
        if upgraded.run != record.run:
            moves.append((path.parent, path.parent.with_name(upgraded.run)))
        return Change(path, upgraded.to_text())
    target = path.with_name(f"{upgraded.run}.json")
    if target != path and target.is_file():
        present = Record.from_dict(_read(target), target)
        if present.config != upgraded.config:
            raise ValueError(f"tra upgrade: {path} is run {upgraded.run} now, and {target} holds another config; "
                             "expected one record per run")  # fmt: skip
        upgraded = present.merged(upgraded)
    return Change(target, upgraded.to_text(), replaces=path)


def _check_moves(moves: list[tuple[Path, Path]]) -> None:
    """A store run folder renamed to its new identity must not meet another (two trainings of one run: keep the
    one you want and run ``tra upgrade`` again)."""
    for old, new in moves:
        if new.exists():
            raise ValueError(f"tra upgrade: {old} is run {new.name} now, and {new} exists; expected one folder per run "
                             "(remove one of them and run tra upgrade again)")  # fmt: skip


def plan(path: str | Path) -> Plan:
    """What ``upgrade`` would do under ``path``, every file read and every conversion checked; nothing written."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"tra upgrade: {path} does not exist; expected a run, model, store or results folder")
    found = Plan()
    if path.is_file():
        data = _read(path) if path.suffix == ".json" else None
        if data is None or kind_of(path, data, named=False) is None:
            raise ValueError(f"tra upgrade: {path} is not a config or run record of tra; expected a JSON file of "
                             "one, or a folder")  # fmt: skip
        plan_file(path, found, named=False)
    else:
        for file in sorted(path.rglob("*.json")):
            if file.is_file():
                plan_file(file, found)
        if any((path / name).is_file() for name in ROW_FILES):
            evidence = Evidence(path / "runs")
            found.found += [path / name for name in ROW_FILES if (path / name).is_file()]
            for record in folder_records(path):
                if evidence.get(record.run) is None:
                    found.changes.append(Change(evidence.path(record.run), record.to_text()))
    _check_moves(found.moves)
    if not found.found:
        others = f" ({len(found.left_alone)} file(s) that are not JSON left alone)" if found.left_alone else ""
        raise ValueError(f"tra upgrade: {path} holds no file of tra{others}; expected a run, checkpoint, model, store "
                         "or results folder, or a config or run record")  # fmt: skip
    return found


def upgrade(path: str | Path, notice=None) -> list[Path]:
    """Convert every file of an earlier version under ``path`` (see the module's docstring); the files written,
    each at its final place. ``notice`` (a callable) hears of each file left alone. Every file is read and every
    conversion checked first: a file of tra that cannot be converted stops the upgrade before anything is written."""
    found = plan(path)
    for file, why in found.left_alone:
        if notice is not None:
            notice(f"left alone: {file} ({why}; not a file of tra)")
    written = [change.apply() for change in found.changes]
    for old, new in found.moves:  # the files written inside a moved run folder, at their new place
        old.rename(new)
        written = [new / f.relative_to(old) if f.is_relative_to(old) else f for f in written]
    return written
