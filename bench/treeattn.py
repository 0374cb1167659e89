"""Verifying a token tree in one target forward, on any engine.

A tree of N drafted nodes hangs below the root r = the last committed token. Nodes are listed
parents-first; parents[j] is the index of node j's parent in 0..N (0 = the root, node j is row
j + 1). The forward input is [r, n_1..n_N] with
    position_ids = cached_len + depth        (root depth 0)
    attention    = a (1, N+1, cached_len+N+1) bool mask, True where a row may attend
                   (every cached position, itself, its ancestors): engines.base.tree_mask,
so each node's logits equal those of decoding its root-to-node path sequentially. Afterwards
`keep_path` keeps only the cached positions of the accepted path.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.tree import parents_from_paths
from engines.base import tree_mask


@dataclass(frozen=True)
class TreeLayout:
    """The shape of a tree, independent of its tokens: parents, depths, ancestor matrix."""
    parents: torch.Tensor  # (N,) long, values in 0..N (row index of the parent; 0 = root)
    depth: torch.Tensor  # (N+1,) long, root 0
    ancestors: torch.Tensor  # (N+1, N+1) bool: [i, j] = j is i or an ancestor of i

    @property
    def size(self) -> int:
        return self.parents.numel()

    @classmethod
    def from_parents(cls, parents: list[int]) -> "TreeLayout":
        n = len(parents)
        anc = torch.eye(n + 1, dtype=torch.bool)
        depth = torch.zeros(n + 1, dtype=torch.long)
        for j, p in enumerate(parents, start=1):
            if not 0 <= p < j:
                raise ValueError(f"tree node {j} has parent {p}: parents must come first")
            anc[j] |= anc[p]
            depth[j] = depth[p] + 1
        return cls(torch.tensor(parents, dtype=torch.long), depth, anc)

    @classmethod
    def from_paths(cls, paths: list[list[int]]) -> tuple["TreeLayout", list[tuple[int, ...]]]:
        """A static tree given as paths of child ranks (Medusa's `medusa_choices` form).

        Returns the layout and the paths in node order (by depth, then rank): row j + 1 is
        path order[j]. Every prefix of a path must be a path too.
        """
        order, parents = parents_from_paths([tuple(p) for p in paths])
        return cls.from_parents([a + 1 for a in parents]), order


def verify_tree(engine, root: torch.Tensor, tokens: torch.Tensor, layout: TreeLayout, cache,
                hidden=()):
    """One forward over [root, tokens] (root (1,), tokens (N,)) → engines.base.Out
    (logits (1, N+1, V), and the hidden states asked for)."""
    cached = cache.length
    inp = torch.cat([root, tokens])[None]
    pos = (cached + layout.depth.to(inp.device))[None]
    mask = tree_mask(layout.ancestors.to(inp.device), cached)
    return engine.forward(inp, cache, positions=pos, mask=mask, hidden=hidden)


def keep_path(cache, cached: int, path: list[int]) -> None:
    """After verify: keep cached positions, the root, and the accepted nodes (rows in `path`)."""
    cache.keep(cached, torch.tensor([0] + path, dtype=torch.long))
