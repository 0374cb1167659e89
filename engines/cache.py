"""KV caches behind one small interface: `length`, `crop(n)`, `keep(start, offsets)`, `nbytes()`.

StaticCache (the lean engine): keys and values preallocated for the turn,
    k, v   (layers, batch, kv_heads, capacity, head_dim)
positions [0, length) are valid. Rolling back is setting `length`; keeping an accepted tree path
is one index copy of its rows to [start, start + len(path)). A forward past `capacity` grows it.

HFCache (the hf engine): a transformers DynamicCache, layer i holding keys/values
(batch, kv_heads, length, head_dim); rolled back and path-kept by slicing those tensors (not
through `crop()`, whose signature moved between transformers releases).
"""

from __future__ import annotations

import torch


class StaticCache:
    def __init__(
        self,
        layers: int,
        batch: int,
        kv_heads: int,
        capacity: int,
        head_dim: int,
        dtype: torch.dtype,
        device,
    ):
        shape = (layers, batch, kv_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def reserve(self, n: int) -> None:
        """Make room for n positions (doubling, so a long turn regrows rarely)."""
        if n <= self.capacity:
            return
        new = max(n, 2 * self.capacity)
        for name in ("k", "v"):
            old = getattr(self, name)
            grown = old.new_zeros(*old.shape[:3], new, old.shape[4])
            grown[:, :, :, : self.length] = old[:, :, :, : self.length]
            setattr(self, name, grown)

    def crop(self, n: int) -> None:
        self.length = min(self.length, n)

    def keep(self, start: int, offsets: torch.Tensor) -> None:
        """Keep [0, start) followed by positions start + offsets (an accepted tree path)."""
        src = start + offsets.to(self.k.device)
        m = src.numel()
        self.k[:, :, :, start : start + m] = self.k[:, :, :, src]
        self.v[:, :, :, start : start + m] = self.v[:, :, :, src]
        self.length = start + m

    def nbytes(self) -> int:
        """Bytes held for the valid positions (what a cache of exactly this length needs)."""
        per_pos = self.k[:, :, :, :1].numel() * self.k.element_size()
        return 2 * per_pos * self.length


class HFCache:
    def __init__(self):
        from transformers import DynamicCache

        self.dc = DynamicCache()

    @property
    def length(self) -> int:
        return self.dc.get_seq_length()

    def _layers(self):
        for layer in self.dc.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                yield layer

    def crop(self, n: int) -> None:
        for layer in self._layers():
            layer.keys = layer.keys[..., :n, :]
            layer.values = layer.values[..., :n, :]

    def keep(self, start: int, offsets: torch.Tensor) -> None:
        idx = torch.cat([torch.arange(start, device=offsets.device), start + offsets])
        for layer in self._layers():
            layer.keys = layer.keys.index_select(-2, idx.to(layer.keys.device))
            layer.values = layer.values.index_select(-2, idx.to(layer.values.device))

    def nbytes(self) -> int:
        return sum(2 * layer.keys.numel() * layer.keys.element_size() for layer in self._layers())
