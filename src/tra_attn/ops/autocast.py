"""The region an op computes in its own precision: no enclosing autocast may recast its inputs or round its scores."""

from __future__ import annotations

import contextlib

import torch


def no_autocast(device: torch.device):
    """Autocast off on ``device``; meta tensors (shapes only, for planning and tracing) have no autocast to turn off."""
    return contextlib.nullcontext() if device.type == "meta" else torch.autocast(device.type, enabled=False)
