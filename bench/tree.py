"""Token trees and the tree accept rule: recursive rejection sampling over sibling candidates.

A drafted tree hangs below the root, the last committed token. Node i has a parent
(`parents[i] < i`, −1 for a child of the root), a token, and — when the drafter sampled it — the
draft distribution q_i of its parent's position that its token was drawn from. A tree method
(Medusa, EAGLE) verifies every node in one tree-masked target forward and passes
p (n+1, V): row 0 the target's next-token distribution at the root, row i+1 at node i.

The rule (SpecInfer's multi-candidate verification; without replacement as in recursive
speculative decoding), lossless for any tree:

    node ← root, r ← p[node]
    for each child c of node, in the order the drafter drew them, with s_c its draft distribution
      (q_c; without replacement q_c with the earlier siblings' tokens removed; point mass onehot):
        accept x_c with probability min(1, r(x_c) / s_c(x_c))  → node ← c, r ← p[c], start over
        reject                                                  → r ← norm(max(0, r − s_c))
    no child accepted (or none exists): emit y ~ r and stop.

Why: given the siblings tried so far, x_c ~ s_c, so the step emits y with probability
min(r, s_c)(y) + Σ(r − s_c)+ · norm((r − s_c)+)(y) = r(y), and by induction over siblings each
position emits exactly p; accepted tokens condition the next position as decoding would.
Siblings must be listed exactly as drawn (duplicates of i.i.d. draws kept, draw order kept).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.sampling import point_mass, residual, sample


@dataclass
class Tree:
    """A drafted token tree in topological order (every parent before its children)."""
    parents: list[int]  # (n,) parent node index; −1: child of the root
    tokens: torch.Tensor  # (n,) long
    q: torch.Tensor | None = None  # (n, V) what each token was drawn from; None: point masses
    without_replacement: bool = False  # siblings drawn from q without replacement, in order

    def __post_init__(self):
        self.parents = [int(a) for a in self.parents]
        n = len(self.parents)
        if self.tokens.shape != (n,):
            raise ValueError(f"tokens has shape {tuple(self.tokens.shape)}, expected ({n},)")
        if any(not -1 <= a < i for i, a in enumerate(self.parents)):
            raise ValueError("parents must satisfy -1 <= parents[i] < i (topological order)")
        if self.q is not None and (self.q.dim() != 2 or self.q.shape[0] != n):
            raise ValueError(f"q has shape {tuple(self.q.shape)}, expected ({n}, V)")

    @property
    def size(self) -> int:
        return len(self.parents)

    def children(self) -> list[list[int]]:
        """children()[0]: the root's children; children()[i + 1]: node i's, in index order."""
        out: list[list[int]] = [[] for _ in range(self.size + 1)]
        for i, a in enumerate(self.parents):
            out[a + 1].append(i)
        return out

    def depths(self) -> list[int]:
        """Depth of each node: 1 for a child of the root (its position after the last token)."""
        d: list[int] = []
        for a in self.parents:
            d.append(1 if a < 0 else d[a] + 1)
        return d

    @classmethod
    def chain(cls, tokens: torch.Tensor, q: torch.Tensor | None = None) -> "Tree":
        """x_1..x_m as a tree: node i's parent is node i − 1."""
        return cls(parents=list(range(-1, tokens.numel() - 1)), tokens=tokens, q=q)


def parents_from_paths(paths: list[tuple[int, ...]]) -> tuple[list[tuple[int, ...]], list[int]]:
    """A static tree shape as a list of slot paths (Medusa's "choices": (0,), (0, 1) = second
    child of the first child, ...) → (the paths in topological, draw order; their parents)."""
    order = sorted({tuple(p) for p in paths}, key=lambda p: (len(p), p))
    index = {p: i for i, p in enumerate(order)}
    parents = []
    for p in order:
        if len(p) > 1 and p[:-1] not in index:
            raise ValueError(f"tree path {p} has no parent path {p[:-1]}")
        parents.append(index[p[:-1]] if len(p) > 1 else -1)
    return order, parents


def accept_tree(p: torch.Tensor, tree: Tree,
                generator: torch.Generator | None) -> tuple[list[int], int]:
    """Recursive rejection sampling. p (n+1, V) target probabilities, row 0 the root.

    → (accepted path as node indices from the root down, the token emitted after it).
    """
    kids = tree.children()
    tokens = tree.tokens.tolist()
    vocab = p.shape[-1]
    path: list[int] = []
    row = 0  # p row of the current node: 0 = root, i + 1 = node i
    while True:
        r = p[row]
        removed: list[int] = []  # earlier siblings' tokens (without replacement)
        u = torch.rand(len(kids[row]), generator=generator, device=p.device).tolist()
        moved = False
        for j, c in enumerate(kids[row]):
            x = tokens[c]
            if tree.q is None:
                s = point_mass(x, vocab, p)
            else:
                s = tree.q[c]
                if tree.without_replacement and removed:
                    s = s.clone()
                    s[removed] = 0
                    s = s / s.sum() if s.sum() > 0 else s
            rx, sx = float(r[x]), float(s[x])
            if u[j] * sx < rx:  # u < r/s, i.e. probability min(1, r(x)/s(x)); s(x) = 0 accepts
                path.append(c)
                row = c + 1
                moved = True
                break
            r = residual(r, s)
            removed.append(x)
        if not moved:
            return path, sample(r, generator)


def accept_tree_greedy(scores: torch.Tensor, tree: Tree) -> tuple[list[int], int]:
    """Temperature 0: follow the child whose token is the target's argmax, else emit the argmax.

    scores (n+1, V): logits or probabilities, row 0 the root. → (accepted path, next token).
    """
    target = scores.argmax(-1).tolist()  # (n+1,)
    kids = tree.children()
    tokens = tree.tokens.tolist()
    path: list[int] = []
    row = 0
    while True:
        nxt = next((c for c in kids[row] if tokens[c] == target[row]), None)
        if nxt is None:
            return path, target[row]
        path.append(nxt)
        row = nxt + 1
