"""Key/value cache for incremental decoding: per layer, the keys and values seen so far."""

from __future__ import annotations

import torch


class LayerCache:
    """Keys and values (B, H, S, D) of one attention layer, plus optional per-key extras (B, H, S)."""

    def __init__(self):
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.extras: dict[str, torch.Tensor] = {}

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def update(self, keys: torch.Tensor, values: torch.Tensor, **extras: torch.Tensor):
        """Append new positions; return all keys, values and extras including the new ones."""
        if self.keys is None:
            self.keys, self.values, self.extras = keys, values, dict(extras)
        else:
            self.keys = torch.cat([self.keys, keys], dim=-2)
            self.values = torch.cat([self.values, values], dim=-2)
            for name, value in extras.items():
                self.extras[name] = torch.cat([self.extras[name], value], dim=-1)
        return self.keys, self.values, self.extras


class KVCache:
    """One LayerCache per layer of a model."""

    def __init__(self, n_layers: int):
        self.layers = [LayerCache() for _ in range(n_layers)]

    def __getitem__(self, index: int) -> LayerCache:
        return self.layers[index]

    @property
    def length(self) -> int:
        return self.layers[0].length
