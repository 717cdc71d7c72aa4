"""Dataclass configs from plain dicts (JSON), strictly: unknown fields, and optionally missing ones, are errors."""

from __future__ import annotations

import dataclasses

from .checks import is_int


def dataclass_from_dict(cls, data: dict, required: bool = False, where=None):
    """``cls(**data)``, refusing keys that are not fields of ``cls`` (and, if ``required``, missing ones); errors
    name ``where`` (the file), if known."""
    at = f"{where}: " if where else ""
    if not isinstance(data, dict):
        raise ValueError(f"{at}{cls.__name__}: got {type(data).__name__}; expected a JSON object of fields")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{at}{cls.__name__}: unknown fields {unknown}; expected a subset of {sorted(known)}")
    missing = sorted(known - set(data)) if required else []
    if missing:
        raise ValueError(f"{at}{cls.__name__}: missing fields {missing}; expected every field of {sorted(known)}")
    return cls(**data)


class OldVersion(ValueError):
    """A config written by an earlier version of tra: ``tra upgrade`` converts it (``tra_attn/upgrade``)."""


def current_fields(name: str, data, current: int, where=None, partial: bool = False, path=None) -> dict:
    """A copy of ``data`` without its "version" key, which must be ``current`` (absent: 1, or ``current`` for a
    ``partial`` dict written by hand); an ``OldVersion`` naming ``tra upgrade`` of ``path`` (default ``where``,
    the file that errors name, if known) for an earlier one, a ValueError for a newer one or for what is not a
    dict."""
    at = f"{where}: " if where else ""
    if not isinstance(data, dict):
        raise ValueError(f"{at}{name}: got {type(data).__name__}; expected a JSON object of fields")
    data = dict(data)
    version = data.pop("version", current if partial else 1)
    if is_int(version) and 1 <= version < current:
        raise OldVersion(
            f"{at}{name} version {version}, written by an earlier version of tra; expected version {current}: "
            f"convert it with `tra upgrade {path or where or 'PATH'}` (PATH: the file, or the run, model or results "
            "folder it is in)"
        )
    if version != current:
        raise ValueError(f"{at}{name}: version = {version!r}; expected {current} (newer files need a newer tra)")
    return data
