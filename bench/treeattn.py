"""Verifying a token tree in one forward of an unmodified transformers model.

A tree of N drafted nodes hangs below the root r = the last committed token. Nodes are listed
parents-first; parents[j] is the index of node j's parent in 0..N (0 = the root, node j is row
j + 1). The forward input is [r, n_1..n_N] with
    position_ids = cached_len + depth        (root depth 0)
    attention    = a float (1, 1, N+1, cached_len+N+1) mask: 0 where a row may attend
                   (every cached position, itself, its ancestors), dtype-min elsewhere,
so each node's logits equal those of decoding its root-to-node path sequentially. Afterwards
`keep_path` keeps only the cached positions of the accepted path.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from bench import kvcache
from bench.tree import parents_from_paths


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


def tree_mask(layout: TreeLayout, cached: int, dtype: torch.dtype, device) -> torch.Tensor:
    n = layout.size + 1
    mask = torch.zeros(1, 1, n, cached + n, dtype=dtype, device=device)
    mask[0, 0, :, cached:].masked_fill_(~layout.ancestors.to(device), torch.finfo(dtype).min)
    return mask


def verify_tree(model, root: torch.Tensor, tokens: torch.Tensor, layout: TreeLayout, cache,
                hidden_states: bool = False):
    """One forward over [root, tokens] (root (1,), tokens (N,)); returns the model output
    (logits (1, N+1, V), and hidden states if asked)."""
    cached = kvcache.cache_len(cache)
    inp = torch.cat([root, tokens])[None]
    pos = (cached + layout.depth.to(inp.device))[None]
    dtype = next(model.parameters()).dtype
    mask = tree_mask(layout, cached, dtype, inp.device)
    return kvcache.forward(model, inp, cache, position_ids=pos, attention_mask=mask,
                           hidden_states=hidden_states)


def keep_path(cache, cached: int, path: list[int]) -> None:
    """After verify: keep cached positions, the root, and the accepted nodes (rows in `path`)."""
    offsets = torch.tensor([0] + path, dtype=torch.long)
    kvcache.keep_positions(cache, cached, offsets)
