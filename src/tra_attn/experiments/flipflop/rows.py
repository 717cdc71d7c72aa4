"""Upgrade of flip-flop result rows written before 0.2.0, so old results keep loading.

0.1 rows named the per-token metrics after flip-flop's reads (``read_acc``, ``reads``) and stored a
version-1 training config; ``upgrade_rows`` gives them today's metric names and config, values untouched.
"""

from __future__ import annotations

import json

from ...training.config import TrainConfig

RENAMED_METRICS = {"read_acc": "token_acc", "reads": "scored_tokens"}


def upgrade_rows(rows: list[dict]) -> list[dict]:
    configs: dict[str, dict] = {}  # thousands of rows share a few configs: migrate each once
    upgraded = []
    for row in rows:
        config = row.get("config") or {}
        if config and "version" not in config:
            key = json.dumps(config, sort_keys=True)
            if key not in configs:
                configs[key] = TrainConfig.from_dict(config).to_dict()
            config = configs[key]
        upgraded.append({**row, "metric": RENAMED_METRICS.get(row["metric"], row["metric"]), "config": config})
    return upgraded
