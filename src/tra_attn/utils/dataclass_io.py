"""Dataclass configs to and from plain dicts: strict loading and per-field help texts for the CLI."""

from __future__ import annotations

import dataclasses


def field_help(cls, name: str) -> str:
    """The ``help`` metadata of a dataclass field ('' if it has none)."""
    return next((f.metadata.get("help", "") for f in dataclasses.fields(cls) if f.name == name), "")


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
