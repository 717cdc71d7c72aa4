"""Dataclass configs from plain dicts (JSON), strictly: unknown fields, and optionally missing ones, are errors."""

from __future__ import annotations

import dataclasses


def dataclass_from_dict(cls, data: dict, required: bool = False):
    """``cls(**data)``, refusing keys that are not fields of ``cls`` (and, if ``required``, missing ones)."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: got {type(data).__name__}; expected a JSON object of fields")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown fields {unknown}; expected a subset of {sorted(known)}")
    missing = sorted(known - set(data)) if required else []
    if missing:
        raise ValueError(f"{cls.__name__}: missing fields {missing}; expected every field of {sorted(known)}")
    return cls(**data)


def split_version(name: str, data, current: int) -> tuple[dict, int]:
    """(a copy of ``data`` without its "version" key, that version: 1 when absent), or a ValueError naming
    ``name`` when ``data`` is not a dict or its version is newer than ``current``."""
    if not isinstance(data, dict):
        raise ValueError(f"{name}: got {type(data).__name__}; expected a JSON object of fields")
    data = dict(data)
    version = data.pop("version", 1)
    if version not in range(1, current + 1):
        raise ValueError(
            f"{name}: version = {version!r}; expected a version from 1 to {current} (newer files need a newer tra)"
        )
    return data, version
