"""The retrofit experiment's cache, so that a rerun skips what is done: each trained model (a stage) is a
``save_pretrained`` folder (safetensors weights, config.json) with ``stage.json`` (what defines it and what its
training did), each evaluation a JSON file, all under a hash of what defines them, each written atomically.

A stage is named by its ``spec``: everything its weights depend on (sizes, recipe, seed, attention; a continuation's
base by the base's own id), so changing any of it trains a new stage beside the old one and never reads a stale one.
A stage killed mid-training leaves nothing behind and is trained again by the next run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from ...utils.atomic import atomic_directory, atomic_write_text, make_directory

STAGE_NAME = "stage.json"


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/tra/retrofit`` (``~/.cache/tra/retrofit`` without it)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tra" / "retrofit"


def stage_id(name: str, spec: dict) -> str:
    """``name-<12 hex digits of the spec's hash>``."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    return f"{name}-{digest}"


@dataclass(frozen=True)
class Stage:
    """A model the experiment trains: ``name`` (for messages and folders), ``spec`` (what its weights depend on) and
    ``train`` (builds and trains it: returns the model and what the training did, a JSON-able dict)."""

    name: str
    spec: dict
    train: Callable[[], tuple[nn.Module, dict]]

    @property
    def id(self) -> str:
        return stage_id(self.name, self.spec)


def load_model(folder: Path):
    """A stage's model: converted ones through ``load_attention``, others as transformers saved them."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from ...hf import load_attention
    from ...hf.attention import converted_kind

    with no_progress_bars():  # transformers' bar over the loaded tensors
        if converted_kind(AutoConfig.from_pretrained(folder)) is not None:
            return load_attention(folder)
        return AutoModelForCausalLM.from_pretrained(folder).eval()


@contextlib.contextmanager
def no_progress_bars():
    """transformers' progress bars off inside, as they were after."""
    from transformers.utils import logging

    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            logging.enable_progress_bar()


class StageCache:
    """The cache folder; ``say`` reports each stage and evaluation trained, computed or reused (the ids of this run's
    in ``computed`` and ``reused``)."""

    def __init__(self, folder: str | os.PathLike, say: Callable[[str], None] = print):
        self.folder = make_directory(Path(folder).expanduser(), "--cache")  # refused now, before any training
        self.say = say
        self.loaded: dict[str, nn.Module] = {}
        self.computed: list[str] = []
        self.reused: list[str] = []

    def model(self, stage: Stage) -> nn.Module:
        """The stage's model: in memory, loaded from its folder, or trained now and saved."""
        if stage.id not in self.loaded:
            folder = self.folder / stage.id
            if (folder / STAGE_NAME).is_file():
                self._reuse(stage)
                self.loaded[stage.id] = load_model(folder)
            else:
                self.loaded[stage.id] = self._train(stage, folder)
        return self.loaded[stage.id]

    def info(self, stage: Stage) -> dict:
        """What the stage's training did (``stage.json``), training it first if it is not done."""
        path = self.folder / stage.id / STAGE_NAME
        if path.is_file():
            self._reuse(stage)
        else:
            self.model(stage)
        return json.loads(path.read_text(encoding="utf-8"))

    def _reuse(self, stage: Stage) -> None:
        if stage.id not in self.computed + self.reused:
            self.reused.append(stage.id)
            self.say(f"retrofit: {stage.name}: trained already ({self.folder / stage.id})")

    def _train(self, stage: Stage, folder: Path) -> nn.Module:
        self.say(f"retrofit: {stage.name}: training")
        model, info = stage.train()
        record = {"name": stage.name, "spec": stage.spec, **info}
        with no_progress_bars():  # save_pretrained's bar of one shard
            atomic_directory(folder, lambda tmp: _write(model, tmp, record), keep_others=False)
        self.computed.append(stage.id)
        self.say(f"retrofit: {stage.name}: trained in {info['train_seconds'] / 60:.1f} min, saved in {folder}")
        return model

    def result(self, name: str, spec: dict, compute: Callable[[], dict]) -> dict:
        """The cached result of ``spec`` (a JSON file), or ``compute()`` now and cached."""
        path = self.folder / f"{stage_id(name, spec)}.json"
        if path.is_file():
            self.reused.append(path.stem)
            return json.loads(path.read_text(encoding="utf-8"))["result"]
        self.say(f"retrofit: {name}: evaluating")
        result = compute()
        atomic_write_text(path, json.dumps({"name": name, "spec": spec, "result": result}, indent=2) + "\n")
        self.computed.append(path.stem)
        return result


def _write(model: nn.Module, folder: Path, record: dict) -> None:
    model.save_pretrained(folder)
    (folder / STAGE_NAME).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
