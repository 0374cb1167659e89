"""Verifying a token tree in one target forward, on any engine, and keeping the accepted path.

The tree (groundfloor.tree's numbering: node i has parent parents[i], −1 = the root r, the last
committed token) is fed as [r, n_0..n_{N−1}], node i at row i + 1, with
    position_ids = cached_len + depth        (root depth 0)
    attention    = [every cached position | the row's own ancestors and itself]
                   (engines.base.tree_mask over TreeLayout.ancestors)
so each node's logits equal those of decoding its root-to-node path sequentially. Afterwards
`keep_path` keeps only the cached positions of the root and the accepted nodes.
"""

from __future__ import annotations

import torch

from engines.base import tree_mask
from groundfloor.devices import to_device
from groundfloor.tree import TreeLayout


def verify_tree(
    engine, root: torch.Tensor, tokens: torch.Tensor, layout: TreeLayout, cache, hidden=()
):
    """One forward over [root, tokens] (root (1,), tokens (N,)) → engines.base.Out
    (logits (1, N+1, V), and the hidden states asked for)."""
    if not tokens.numel():  # a plain round: the engine's decoding step, no tree mask to build
        return engine.forward(root[None], cache, hidden=hidden)
    cached = cache.length
    inp = torch.cat([root, tokens])[None]
    pos = (cached + to_device(layout.depth, inp.device))[None]
    mask = tree_mask(to_device(layout.ancestors, inp.device), cached)
    return engine.forward(inp, cache, positions=pos, mask=mask, hidden=hidden)


def keep_path(cache, cached: int, nodes: list[int]) -> None:
    """After verify: keep `cached` positions, the root, and the accepted nodes (node i is at
    offset i + 1 after the root)."""
    if nodes == list(range(len(nodes))):  # already in place (a plain round, a chain's prefix)
        cache.crop(cached + 1 + len(nodes))
        return
    cache.keep(cached, torch.tensor([0] + [i + 1 for i in nodes], dtype=torch.long))
