"""Result rows of earlier versions as run records (``experiments/store.py``): the runs a results folder holds.

Until 0.3 a comparison wrote its rows into its own folder (``results.jsonl``, ``sweep.jsonl``, their configs
inline or in a ``.configs.json`` sidecar), named by method; a run is now one record under its identity. The
rows of a run are grouped by its config, their configs upgraded, and each run's test rows filed under the
evaluation they imply (the sequences per test split at the training length, or the validation tokens scored).
0.1 named the per-token metrics after flip-flop's reads (``read_acc``, ``reads``); they get today's names.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ..experiments.identity import run_id
from ..experiments.registry import experiment
from ..experiments.store import Record, lean
from ..training.config import TrainConfig
from ..utils.rows import read_rows
from .configs import upgrade_train_config

RENAMED_METRICS = {"read_acc": "token_acc", "reads": "scored_tokens"}
ROW_FILES = ("results.jsonl", "sweep.jsonl")


def renamed(row: dict) -> dict:
    """A row with the metric names of today."""
    return {**row, "metric": RENAMED_METRICS.get(row["metric"], row["metric"])}


def commits(rows: list[dict]) -> str:
    """The commit of the rows, or their commits in order of appearance ("a, b": evaluated again later)."""
    return ", ".join(dict.fromkeys(r["commit"] for r in rows))


def evaluation_of(config: TrainConfig, tests: list[dict]) -> str:
    """The evaluation test rows come from: ``sequences=N`` (N per test split at the training length) for a
    procedural task, ``tokens=N`` (the validation tokens scored, the first token unscored) for text."""
    found = experiment(config.task, "the rows' task")
    if found.budget_unit == "tokens":
        scored = [r["value"] for r in tests if r["metric"] == "scored_tokens" and r.get("factor") == 1]
        return f"tokens={int(max(scored)) + 1}"
    sequences = [r["value"] for r in tests if r["metric"] == "sequences" and r["length"] == config.length]
    return f"sequences={int(max(sequences))}"


def records_from_rows(rows: list[dict], where) -> list[Record]:
    """One record per run (distinct config) of ``rows``; rows without a config cannot be stored by identity and
    are refused, naming ``where``."""
    if any(not isinstance(r.get("config"), dict) for r in rows):
        raise ValueError(f"{where}: rows without their run's config; expected rows written by 0.2 or later, whose "
                         "configs say which run they are")  # fmt: skip
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[json.dumps(row["config"], sort_keys=True)].append(renamed(row))
    records = []
    for group in groups.values():
        config = TrainConfig.from_dict(upgrade_train_config(group[0]["config"]))
        unique = list({json.dumps(lean(r), sort_keys=True): r for r in group}.values())  # results and sweep repeat
        validation = [r for r in unique if r["split"] == "validation"]
        tests = [r for r in unique if r["split"] != "validation"]
        evaluated = {}
        if tests:
            evaluated[evaluation_of(config, tests)] = {"commit": commits(tests), "rows": [lean(r) for r in tests]}
        record = Record(run_id(config), config.to_dict(), commits(validation or group), [lean(r) for r in validation],
                        evaluated)  # fmt: skip
        records.append(record)
    return records


def folder_records(folder: Path) -> list[Record]:
    """The records of a results folder of an earlier version (its ``results.jsonl`` and ``sweep.jsonl``)."""
    rows = [row for name in ROW_FILES for row in read_rows(Path(folder) / name)]
    if not rows:
        raise ValueError(f"{folder}: no {' or '.join(ROW_FILES)}; expected the folder of an earlier comparison")
    return records_from_rows(rows, folder)
