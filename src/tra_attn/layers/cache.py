"""Key/value cache for incremental decoding: per layer, preallocated buffers of the keys and values seen so far.

Buffers grow geometrically (or are sized once by ``KVCache(n_layers, capacity)``), so decoding N tokens
copies O(N) elements in total instead of the O(N^2) of concatenating at every step. The cache is an
inference structure: its buffers are written in place, so it must not be used under autograd.
"""

from __future__ import annotations

import torch


class LayerCache:
    """Keys and values (B, H, S, D) of one attention layer, plus optional per-key extras (B, H, S) and per-row
    ``state`` (the block's token shift keeps each row's last key and value there)."""

    def __init__(self, capacity: int = 0):
        self.capacity = capacity  # positions to allocate on the first update (at least the first chunk)
        self.length = 0
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self._extras: dict[str, torch.Tensor] = {}
        self.state: dict[str, torch.Tensor] = {}  # per-row tensors (B, ...) a layer carries between forwards

    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._keys is None else self._keys[:, :, : self.length]

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._values is None else self._values[:, :, : self.length]

    @property
    def extras(self) -> dict[str, torch.Tensor]:
        return {name: buffer[..., : self.length] for name, buffer in self._extras.items()}

    def _reserve(self, needed: int, keys: torch.Tensor, values: torch.Tensor, extras: dict) -> None:
        """Make room for ``needed`` positions: allocate, or move to a buffer twice as large."""
        allocated = 0 if self._keys is None else self._keys.shape[-2]
        if needed <= allocated:
            return
        size = max(needed, self.capacity, 2 * allocated)

        def grow(old: torch.Tensor | None, new: torch.Tensor, dim: int) -> torch.Tensor:
            shape = list(new.shape)
            shape[dim] = size
            buffer = new.new_empty(shape)
            if old is not None:
                buffer.narrow(dim, 0, self.length).copy_(old.narrow(dim, 0, self.length))
            return buffer

        self._keys = grow(self._keys, keys, -2)
        self._values = grow(self._values, values, -2)
        self._extras = {name: grow(self._extras.get(name), value, -1) for name, value in extras.items()}

    def update(self, keys: torch.Tensor, values: torch.Tensor, **extras: torch.Tensor):
        """Append new positions; return all keys, values and extras including the new ones."""
        if self._keys is not None and set(extras) != set(self._extras):
            raise ValueError(f"LayerCache.update: extras {sorted(extras)}; expected {sorted(self._extras)}")
        start, new = self.length, keys.shape[-2]
        self._reserve(start + new, keys, values, extras)
        self._keys[:, :, start : start + new] = keys
        self._values[:, :, start : start + new] = values
        for name, value in extras.items():
            self._extras[name][..., start : start + new] = value
        self.length = start + new
        return self.keys, self.values, self.extras

    def select_batch(self, index: torch.Tensor) -> None:
        """Keep batch entries ``index`` (in that order, repeats allowed): beam search's reordering."""
        self.state = {name: value.index_select(0, index.to(value.device)) for name, value in self.state.items()}
        if self._keys is None:
            return
        self._keys = self._keys.index_select(0, index.to(self._keys.device))
        self._values = self._values.index_select(0, index.to(self._values.device))
        self._extras = {name: buffer.index_select(0, index.to(buffer.device)) for name, buffer in self._extras.items()}


class KVCache:
    """One LayerCache per layer of a model; ``capacity`` preallocates that many positions per layer.

    ``segment_ids`` (B, length) int32: the document of every cached key (-1: padding), kept by the model once a
    forward describes its documents (a padded prompt, packed documents; models/documents.py), else None (one
    document per row, no padding). Appending to it copies (B, length) integers per forward, little next to the
    (B, H, length, D) keys each decoding step reads.
    """

    def __init__(self, n_layers: int, capacity: int = 0):
        self.layers = [LayerCache(capacity) for _ in range(n_layers)]
        self.segment_ids: torch.Tensor | None = None

    def __getitem__(self, index: int) -> LayerCache:
        return self.layers[index]

    @property
    def length(self) -> int:
        return self.layers[0].length

    def select_batch(self, index: torch.Tensor) -> None:
        """Keep batch entries ``index`` of every layer and of the segment ids (beam search's reordering)."""
        for layer in self.layers:
            layer.select_batch(index)
        if self.segment_ids is not None:
            self.segment_ids = self.segment_ids.index_select(0, index.to(self.segment_ids.device))
