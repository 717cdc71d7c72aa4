"""A run's identity: a hash of everything in its training config that can change its result.

Two configs that train the same model from the same data have the same identity, however they were written:
fields that only say how a run is watched (how often it logs and checkpoints) and the device's index are left
out, and so is every field, model field, attention option and task parameter that holds its default. A field
added later whose default keeps the old behaviour therefore leaves every existing identity unchanged; a
change of what the code computes for an existing configuration does not show in the hash, so such a change
must come with a field (or a field value) of its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from ..training import TrainConfig

# TrainConfig fields that do not change what a run computes (resume is bit-exact at any checkpoint).
BOOKKEEPING = ("log_every", "checkpoint_every")
# Fields kept even at their default: a reader of the identity should never have to know a default to read it.
ALWAYS = ("task", "seed", "lr", "steps")


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def changed_fields(instance, keep=()) -> dict:
    """The fields of a dataclass instance that differ from their defaults (and those in ``keep``), by name."""
    return {
        f.name: getattr(instance, f.name)
        for f in dataclasses.fields(instance)
        if f.name in keep or getattr(instance, f.name) != _default(f)
    }


def identity(config: TrainConfig) -> dict:
    """The part of ``config`` that decides the run's result, with defaults left out (see the module's docstring)."""
    model = config.model
    found = changed_fields(config, keep=ALWAYS)
    for name in BOOKKEEPING:
        found.pop(name, None)
    found["model"] = {
        **{k: v for k, v in changed_fields(model, keep=("attention",)).items() if k != "attention_options"},
        "attention_options": model.attention_options.changed(),
    }
    task = config.task_instance()
    found["task_args"] = changed_fields(task) if dataclasses.is_dataclass(task) else dict(config.task_args)
    if not found["task_args"]:
        del found["task_args"]
    if "device" in found:
        found["device"] = found["device"].split(":")[0]  # cuda:1 computes what cuda:0 does
        if found["device"] == "cpu":
            del found["device"]
    return found


def run_id(config: TrainConfig) -> str:
    """16 hex digits of the SHA-256 of the canonical JSON of ``identity(config)``."""
    text = json.dumps(identity(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
