"""Where runs live: the run store (training folders, checkpoints) and the evidence (each run's rows, committed).

Every run is kept once, under its identity (``identity.run_id``):

- the **store** holds what a run needs to train and to be evaluated again: ``<store>/<run>/`` is the run's
  training folder (``train_config.json``, ``metrics.jsonl``, checkpoints) and its ``record.json``. Its
  location is ``--store``, else ``$TRA_STORE``, else ``$XDG_CACHE_HOME/tra/runs`` (``~/.cache/tra/runs``):
  never inside ``results/``, so checkpoints are never committed.
- the **evidence** is a folder of records, ``<evidence>/<run>.json`` (``results/runs/`` for the questions under
  ``results/``): one run's training config, its validation rows and its test rows per evaluation, with the
  commits that produced them. Records are lean (no checkpoint) and are what pages are built from.

A record's rows are lean: ``split``, ``length``, ``metric``, ``value`` and the evaluation's own fields
(``factor``, ``stride``...); who trained them (method, seed, rate, config) is said once, by the record.
Records are written atomically, so an interrupted write leaves the previous record or none.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..training import TrainConfig
from ..utils.atomic import atomic_write_text, make_directory
from .identity import run_id

DIVERGED = "diverged"  # the metric of a run whose training diverged: the step it diverged at
RECORD_NAME = "record.json"
ROW_CONTEXT = ("task", "method", "seed", "lr", "config", "commit", "run")  # what a record says once for all rows


def default_store() -> Path:
    """``$TRA_STORE``, else ``$XDG_CACHE_HOME/tra/runs`` (``~/.cache/tra/runs`` without it)."""
    if os.environ.get("TRA_STORE"):
        return Path(os.environ["TRA_STORE"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tra" / "runs"


def lean(row: dict) -> dict:
    """A result row without the fields its record says once (``ROW_CONTEXT``)."""
    return {k: v for k, v in row.items() if k not in ROW_CONTEXT}


@dataclass
class Record:
    """One run's rows: ``validation`` (the last validation, training time and steps, or the divergence) and
    ``tests`` (per evaluation, e.g. ``"sequences=1000"``: the commit that evaluated and the test rows).
    ``retrained``: later trainings of the same config, at other commits, whose rows differed from these (before
    the store, comparisons trained their own runs); each says its commit and the results folder it was in."""

    run: str
    config: dict
    commit: str
    validation: list[dict]
    tests: dict[str, dict] = field(default_factory=dict)
    retrained: list[dict] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return any(r["metric"] == DIVERGED for r in self.validation)

    def covers(self, evaluation: str) -> bool:
        """Whether the record holds the rows of ``evaluation`` (a diverged run has none to hold: it is final)."""
        return self.diverged or evaluation in self.tests

    def rows(self, evaluation: str) -> list[dict]:
        """The validation rows and those of ``evaluation``, lean."""
        tests = [] if self.diverged else self.tests[evaluation]["rows"]
        return self.validation + tests

    def commits(self, evaluation: str) -> list[str]:
        """The commits of the training and of ``evaluation``."""
        found = [self.commit] + ([] if self.diverged else [self.tests[evaluation]["commit"]])
        return list(dict.fromkeys(found))

    def merged(self, other: Record | None) -> Record:
        """This record with the evaluations of ``other`` (the same run) that it lacks."""
        if other is None:
            return self
        retrained = self.retrained + [r for r in other.retrained if r not in self.retrained]
        return Record(self.run, self.config, self.commit, self.validation, {**other.tests, **self.tests}, retrained)

    def to_text(self) -> str:
        """JSON with one row per line: small diffs when a record gains an evaluation."""

        def rows(items: list[dict], indent: str) -> str:
            return "[\n" + ",\n".join(indent + json.dumps(r) for r in items) + "\n" + indent[:-1] + "]"

        tests = ",\n".join(
            f'  {json.dumps(key)}: {{"commit": {json.dumps(value["commit"])}, "rows": {rows(value["rows"], "    ")}}}'
            for key, value in sorted(self.tests.items())
        )
        retrained = f',\n "retrained": {json.dumps(self.retrained)}' if self.retrained else ""
        return (
            f'{{"run": {json.dumps(self.run)}, "commit": {json.dumps(self.commit)},\n'
            f' "config": {json.dumps(self.config, sort_keys=True)},\n'
            f' "validation": {rows(self.validation, "  ")},\n'
            f' "tests": {{' + (f"\n{tests}\n }}" if tests else "}") + retrained + "}\n"
        )

    @classmethod
    def from_dict(cls, data: dict, where) -> Record:
        try:
            return cls(data["run"], data["config"], data["commit"], data["validation"], data.get("tests", {}),
                       data.get("retrained", []))  # fmt: skip
        except (KeyError, TypeError) as err:
            raise ValueError(f"{where}: not a run record ({err}); expected run, commit, config, validation") from None


def read_record(path: Path, run: str | None = None) -> Record | None:
    """The record at ``path``, None if there is none; a ValueError naming the file if it is not one, or not the
    record of ``run`` (default: the run its name says, ``<run>.json`` or ``<run>/record.json``). A record is its
    run's only if its config hashes to the run's identity (``identity.run_id``): an edited config, or a record
    copied to another run's place, is refused, so that a page never shows a run it did not ask for."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err}); expected a run record") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a JSON {type(data).__name__}; expected a run record (an object)")
    record = Record.from_dict(data, path)
    expected = run or (path.parent.name if path.name == RECORD_NAME else path.name.removesuffix(".json"))
    if record.run != expected:
        raise ValueError(f"{path}: holds run {record.run!r}; expected run {expected!r}, the run its place names")
    check_identity(record, path)
    return record


def check_identity(record: Record, where) -> None:
    """A ValueError naming ``where`` and both ids unless ``record``'s config hashes to the run it says it is."""
    if not isinstance(record.config, dict):
        raise ValueError(f"{where}: config = {record.config!r}; expected the run's training config (an object)")
    found = run_id(TrainConfig.from_dict(record.config, where=where))
    if found != record.run:
        raise ValueError(
            f"{where}: its config is run {found}'s, not run {record.run}'s that the record says it holds; expected "
            "the record its run wrote (an edited config, or another run's record copied here: remove the file, and "
            "the run is obtained again)"
        )


class Evidence:
    """A folder of run records, one file per run: ``<folder>/<run>.json``."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    def path(self, run: str) -> Path:
        return self.folder / f"{run}.json"

    def get(self, run: str) -> Record | None:
        return read_record(self.path(run), run)

    def put(self, record: Record) -> None:
        make_directory(self.folder, "the evidence folder")
        atomic_write_text(self.path(record.run), record.to_text())

    def runs(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.json")) if self.folder.is_dir() else []


class RunStore:
    """The store's folder of runs: ``<root>/<run>/`` is a run's training folder, and holds its record."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root).expanduser() if root else default_store()

    def directory(self, run: str) -> Path:
        return self.root / run

    def get(self, run: str) -> Record | None:
        return read_record(self.directory(run) / RECORD_NAME, run)

    def put(self, record: Record) -> None:
        atomic_write_text(self.directory(record.run) / RECORD_NAME, record.to_text())
