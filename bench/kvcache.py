"""KV-cache surgery and the single place where a model forward is called.

Layout: a transformers `DynamicCache`; layer i holds `keys`/`values` of shape
(batch=1, kv_heads, cached_len, head_dim). Rolling back = slicing dim -2, keeping a tree path =
index-selecting dim -2. We touch only the per-layer tensors, so the code does not depend on
`crop()`'s signature, which changed between transformers releases.
"""
from __future__ import annotations

import inspect
from functools import lru_cache

import torch
from transformers import DynamicCache


def new_cache() -> DynamicCache:
    return DynamicCache()


def cache_len(cache: DynamicCache) -> int:
    return cache.get_seq_length()


def crop(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions of every layer."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]


def keep_positions(cache: DynamicCache, start: int, offsets: torch.Tensor) -> None:
    """Keep positions [:start] plus start + offsets (an accepted tree path), in that order."""
    idx = torch.cat([torch.arange(start, device=offsets.device), start + offsets])
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            layer.keys = layer.keys.index_select(-2, idx.to(layer.keys.device))
            layer.values = layer.values.index_select(-2, idx.to(layer.values.device))


def cache_bytes(cache: DynamicCache) -> int:
    n = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is not None:
                n += t.numel() * t.element_size()
    return n


@lru_cache(maxsize=None)
def _cache_kwarg(model_cls: type) -> str:
    # transformers 5.24 renamed `past_key_values` to `cache`; accept both spellings.
    params = inspect.signature(model_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def forward(model, input_ids: torch.Tensor, cache: DynamicCache, *, position_ids=None,
            attention_mask=None, logits_to_keep: int = 0, hidden_states: bool = False):
    """One target/draft forward over `input_ids` (shape (1, n)) appended to `cache`.

    Returns the model output (logits (1, n or logits_to_keep, V); hidden_states if asked).
    """
    kwargs = {_cache_kwarg(type(model)): cache, "use_cache": True, "logits_to_keep": logits_to_keep}
    if position_ids is not None:
        kwargs["position_ids"] = position_ids
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    if hidden_states:
        kwargs["output_hidden_states"] = True
    return model(input_ids=input_ids, **kwargs)
