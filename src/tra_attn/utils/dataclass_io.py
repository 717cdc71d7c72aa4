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
