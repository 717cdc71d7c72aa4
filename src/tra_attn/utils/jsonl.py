"""JSON Lines files: one JSON object per line."""

from __future__ import annotations

import json
from pathlib import Path

from .atomic import atomic_write_text


def append_jsonl(path: str | Path, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def write_jsonl(path: str | Path, rows: list[dict]) -> None:
    """Replace ``path`` with ``rows`` atomically: readers see the old file or the new one, never a mix."""
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))


def read_jsonl(path: str | Path) -> list[dict]:
    """Rows of a JSONL file ([] if it does not exist); a truncated last line is ignored."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if number == len(lines):  # an interrupted append; the row will be written again
                break
            raise ValueError(f"{path}:{number}: not valid JSON ({err})") from err
    return rows
