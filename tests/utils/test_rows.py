"""Result rows store each run's config once (a sidecar keyed by a hash) and read back whole; inline rows of 0.2
and earlier still read."""

from __future__ import annotations

import json

import pytest

from tra_attn.utils.rows import config_id, configs_path, read_rows, write_rows


def rows_of(config: dict, n: int) -> list[dict]:
    return [
        {"method": "tra", "metric": f"m{i}", "value": float(i), "config": config, "commit": "abc"} for i in range(n)
    ]


def test_rows_round_trip_with_each_config_written_once(tmp_path):
    a, b = {"lr": 1e-3, "model": {"attention": "tra"}}, {"lr": 3e-3, "model": {"attention": "fox"}}
    rows = rows_of(a, 5) + rows_of(b, 3)
    path = tmp_path / "results.jsonl"
    write_rows(path, rows)
    assert configs_path(path) == tmp_path / "results.configs.json"
    stored = json.loads(configs_path(path).read_text())
    assert stored == {config_id(a): a, config_id(b): b}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all("config" not in line and line["config_id"] in stored for line in lines)
    assert read_rows(path) == rows


def test_inline_rows_of_earlier_versions_and_rows_without_configs_read_as_they_are(tmp_path):
    path = tmp_path / "old.jsonl"
    rows = rows_of({"lr": 1e-3}, 2) + [{"method": "tra", "metric": "x", "value": 1.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_rows(path) == rows
    write_rows(tmp_path / "plain.jsonl", rows[-1:])
    assert not configs_path(tmp_path / "plain.jsonl").exists() and read_rows(tmp_path / "plain.jsonl") == rows[-1:]
    assert read_rows(tmp_path / "missing.jsonl") == []


def test_a_row_whose_config_is_missing_is_an_error_naming_both_files(tmp_path):
    path = tmp_path / "results.jsonl"
    write_rows(path, rows_of({"lr": 1e-3}, 2))
    configs_path(path).write_text("{}")
    with pytest.raises(ValueError, match=r"results\.jsonl:1: config '[0-9a-f]{12}' is not in .*results\.configs\.json"):
        read_rows(path)
    configs_path(path).unlink()
    with pytest.raises(ValueError, match=r"results\.jsonl: its configs file .*results\.configs\.json is missing"):
        read_rows(path)
