"""`recycling`: Token Recycling — the target's own discarded candidates, kept per token, fill a
static tree (Luo, Wang, Zhu, Zhang, Zhang, Yang, Xu, "Turning Trash into Treasure: Accelerating
Inference of Large Language Models with Token Recycling", ACL 2025, arXiv:2408.08696).

An adjacency matrix A (V, w) holds, for every token x, the w most likely next tokens the target
last predicted after x (−1: none yet), w = the widest rank the tree uses. Per round:
  draft   fill a static tree template (paths of ranks, methods.static_trees) breadth-first from
          the root, the last committed token: the node at path (r_1, .., r_d) takes
          A[token of its parent, r_d]; a node whose parent's row is empty is dropped with its
          subtree (the template stays prefix-closed);
  verify  one tree-masked target forward over the tree (methods.treeverify);
  accept  the shared tree rule (groundfloor.tree), then every verified row refreshes its token's
          candidates: A[x_i] ← top-w(logits_i) for the root and every node, accepted or not.
The prefill refreshes only the last prompt token's row (all prompt rows would cost L × V logits).
A persists across turns (the paper's hot start): it lives on the method object. With
`hot_start: true` a turn whose prompt was seen before (a measurement repeat, the warm-up)
starts from the matrix its first run started from, so no prompt drafts from its own earlier
answer; `false` starts every turn from an empty matrix.
Drafts are point masses fixed before verification: lossless at any temperature.
Knobs: tree (a name in methods.static_trees.TREES or a list of rank paths), k (tree depth),
hot_start.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from groundfloor.errors import UserError
from groundfloor.tree import TreeLayout
from methods import auto, budget, knobs, sizing, static_trees
from methods.auto import Plan
from methods.base import TreeMethod, TreeProposal

SNAPSHOTS = 8  # prompts whose starting matrix is remembered (they repeat back to back)


@dataclass(frozen=True)
class RecyclingKnobs:  # defaults: conf/method/recycling.yaml
    tree: object  # a named tree | a list of rank paths
    hot_start: bool


class Recycling(TreeMethod):
    name = "recycling"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        kn = knobs.read(cfg, RecyclingKnobs)
        tree = kn.tree
        depth = sizing.k_or_none(self)  # None: the whole tree (k=auto prunes it per round)
        if isinstance(tree, str) and tree not in static_trees.TREES:
            raise UserError(
                f"method.tree={tree!r} is unknown; choose one of: "
                f"{', '.join(static_trees.TREES)}, or a list of rank paths"
            )
        paths = static_trees.TREES[tree] if isinstance(tree, str) else [list(p) for p in tree]
        paths = [p for p in paths if depth is None or len(p) <= depth]
        if not paths:
            raise UserError(f"method.tree={tree!r} with k={depth} leaves no node; use k >= 1")
        try:
            self.layout, order = TreeLayout.from_paths(paths)
        except ValueError as e:
            raise UserError(f"method.tree: {e}")
        self.width = max(p[-1] for p in order) + 1
        dev = ctx.device
        self.rank = torch.tensor([p[-1] for p in order], device=dev)
        self.parent = torch.tensor(self.layout.parents, device=dev)
        # the template level by level: (node indices, their parents (−1: the root))
        self.levels = []
        for d in range(1, self.layout.max_depth + 1):
            idx = torch.tensor([i for i, p in enumerate(order) if len(p) == d], device=dev)
            self.levels.append((idx, self.parent[idx]))
        self.hot_start = kn.hot_start
        self.policy = sizing.pick(  # k=auto: the whole tree, pruned per round from its rates
            self,
            lambda: auto.NodeRates(self.layout.parents, budget.MAX_NODES),
            lambda k: auto.FixedTree(self.layout.max_depth, None, self.layout.size),
        )
        self.adj = torch.full((ctx.target.vocab_size, self.width), -1, dtype=torch.long, device=dev)
        self.snapshots: OrderedDict[tuple, torch.Tensor] = OrderedDict()
        self.info = {
            "tree_nodes": self.layout.size,
            "depth": self.layout.max_depth,
            "width": self.width,
            "hot_start": self.hot_start,
        }

    def max_verify_width(self) -> int:
        return self.layout.size + 1

    def static_bytes(self) -> int:
        return self.adj.numel() * self.adj.element_size()

    # --- per turn ---
    def start(self, state) -> None:
        if not self.hot_start:
            self.adj.fill_(-1)
            return
        key = tuple(state.tokens.tolist())
        if key in self.snapshots:  # seen before: start where its first run started
            self.adj.copy_(self.snapshots[key])
            self.snapshots.move_to_end(key)
        else:
            self.snapshots[key] = self.adj.clone()
            if len(self.snapshots) > SNAPSHOTS:
                self.snapshots.popitem(last=False)

    def draft_prefill(self, state, logits) -> None:
        self.adj[state.ids[state.length - 1]] = logits.topk(self.width).indices

    # --- per round ---
    def draft(self, state) -> TreeProposal:
        n = self.layout.size
        tok = torch.full((n,), -1, dtype=torch.long, device=state.ids.device)
        root = state.ids[state.length - 1]
        for idx, par in self.levels:  # breadth-first: a level reads its parents' tokens
            src = torch.where(par < 0, root, tok[par.clamp_min(0)])
            cand = self.adj[src.clamp_min(0), self.rank[idx]]
            tok[idx] = torch.where(src < 0, -1, cand)
        keep = tok >= 0
        whole = bool(keep.all())
        # prefix-closed: a dropped parent drops its kids
        kept = self.policy.choose(
            steps=0, allowed=None if whole else keep.nonzero().flatten().tolist()
        )
        if len(kept) == n:
            return TreeProposal(tokens=tok, layout=self.layout, plan=Plan(nodes=kept))
        parents = auto.subtree(self.layout.parents, kept)
        return TreeProposal(
            tokens=tok[kept], layout=TreeLayout.from_parents(parents), plan=Plan(nodes=kept)
        )

    def after_accept(self, state, proposal, nodes, logits, hidden) -> None:
        # row 0 is the root (the last committed token), row i + 1 node i
        rows = torch.cat([state.ids[state.length - 1 : state.length], proposal.tokens])
        self.adj[rows] = logits.topk(self.width, dim=-1).indices
