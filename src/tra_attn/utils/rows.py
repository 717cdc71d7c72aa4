"""Result rows on disk: JSON Lines whose run configs are stored once, in a sidecar file.

A result row is ``{task, split, length, method, seed, metric, value, config, commit, ...}``; the ``config`` of
one run repeats on every row of that run. On disk, ``write_rows`` replaces it by ``config_id`` (a hash of the
config) and writes each distinct config once to ``<rows>.configs.json``; ``read_rows`` puts it back, so code
reading rows sees them whole. Rows written inline (by 0.2 and earlier) still read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .atomic import atomic_write_text
from .jsonl import read_jsonl, write_jsonl


def configs_path(path: str | Path) -> Path:
    """The sidecar of a rows file: ``results.jsonl`` -> ``results.configs.json``."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(".jsonl") + ".configs.json")


def config_id(config: dict) -> str:
    """A short, stable name of a config: the first 12 hex digits of the SHA-256 of its canonical JSON."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


def write_rows(path: str | Path, rows: list[dict]) -> None:
    """Write ``rows`` to ``path`` with each distinct ``config`` stored once in the sidecar (written first, both
    atomically: a reader never sees a row whose config is missing)."""
    configs, lean = {}, []
    for row in rows:
        config = row.get("config")
        if isinstance(config, dict):
            key = config_id(config)
            configs[key] = config
            row = {**{name: value for name, value in row.items() if name != "config"}, "config_id": key}
        lean.append(row)
    sidecar = configs_path(path)
    if configs:
        atomic_write_text(sidecar, json.dumps(configs, sort_keys=True, indent=1) + "\n")
    elif sidecar.is_file():
        sidecar.unlink()
    write_jsonl(path, lean)


def read_rows(path: str | Path) -> list[dict]:
    """The rows of ``path`` ([] if it does not exist), each with its ``config`` (one dict shared by the rows of
    a run); a row naming a config the sidecar lacks is a ValueError naming both files."""
    rows = read_jsonl(path)
    if not any("config_id" in row for row in rows):
        return rows
    sidecar = configs_path(path)
    try:
        configs = json.loads(sidecar.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: its configs file {sidecar} is missing or not valid JSON ({err})") from None
    whole = []
    for number, row in enumerate(rows, 1):
        if "config_id" in row:
            key = row["config_id"]
            if key not in configs:
                raise ValueError(f"{path}:{number}: config {key!r} is not in {sidecar}")
            row = {name: value for name, value in row.items() if name != "config_id"}
            row["config"] = configs[key]
        whole.append(row)
    return whole
