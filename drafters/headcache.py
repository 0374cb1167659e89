"""The KV cache of an EAGLE head's own layer (drafters.eagle): written in place, grown by doubling,
truncated after each round to the committed positions."""

from __future__ import annotations

import torch


class HeadCache:
    """The head's KV cache: keys/values (1, kv_heads, n, head_dim), written in place into
    buffers that double when full (a round's drafted tokens are appended, its rejected ones
    truncated: no per-step concatenation of the whole cache)."""

    def __init__(self):
        self._k = self._v = None
        self.n = 0

    def __len__(self) -> int:
        return self.n

    @property
    def k(self):
        return None if self._k is None else self._k[..., : self.n, :]

    @property
    def v(self):
        return None if self._v is None else self._v[..., : self.n, :]

    def reserve(self, m: int, heads: int, dim: int, dtype) -> tuple:
        """Room for m more entries: the whole buffers (1, heads, capacity, dim), grown (doubled)
        where full; the caller writes entries n .. n + m − 1 and then advances n."""
        if self._k is None or self.n + m > self._k.shape[-2]:
            cap = max(2 * (self.n + m), 64)
            like = self._k if self._k is not None else torch.empty(0, dtype=dtype)
            bk, bv = like.new_empty((1, heads, cap, dim)), like.new_empty((1, heads, cap, dim))
            if self.n:
                bk[..., : self.n, :] = self._k[..., : self.n, :]
                bv[..., : self.n, :] = self._v[..., : self.n, :]
            self._k, self._v = bk, bv
        return self._k, self._v

    def append(self, k, v) -> None:
        m = k.shape[-2]
        bk, bv = self.reserve(m, k.shape[-3], k.shape[-1], k.dtype)
        bk[..., self.n : self.n + m, :] = k
        bv[..., self.n : self.n + m, :] = v
        self.n += m

    def truncate(self, n: int) -> None:
        self.n = min(self.n, n)

    def nbytes(self) -> int:
        """The buffers held (their capacity, not only the entries in use)."""
        return 0 if self._k is None else 2 * self._k.numel() * self._k.element_size()
