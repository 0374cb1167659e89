"""Token trees: their one numbering, their shape, and the tree accept rule.

Numbering (used everywhere, never converted): a drafted tree hangs below the root, the last
committed token; its N nodes are listed parents first, node i has `parents[i] < i`, or −1 when
it is a child of the root. A verify forward's rows are [root, node 0, .., node N−1]: node i is
row i + 1 (methods.treeverify).

`TreeLayout` is a shape (parents, depths, the ancestor matrix behind the attention mask);
`Tree` is a drafted tree (a shape's parents, its tokens, and — when the drafter sampled them —
the draft distribution q_i of its parent's position that token i was drawn from). A tree method
verifies every node in one tree-masked target forward and passes p (N+1, V): row 0 the target's
next-token distribution at the root, row i+1 at node i.

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

import functools
from dataclasses import dataclass

import torch

from groundfloor.sampling import SamplingParams, point_mass, probs, residual, sample


def children_of(parents) -> list[list[int]]:
    """[0]: the root's children; [i + 1]: node i's, in index order."""
    out: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, a in enumerate(parents):
        out[a + 1].append(i)
    return out


@dataclass(frozen=True)
class TreeLayout:
    """The shape of a tree, independent of its tokens."""

    parents: tuple[int, ...]  # (N,) parent node index; −1: child of the root
    depth: torch.Tensor  # (N+1,) long, per verify row: root 0, node i at row i + 1
    ancestors: torch.Tensor  # (N+1, N+1) bool, rows as above: [i, j] = j is i or above i

    @property
    def size(self) -> int:
        return len(self.parents)

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    def children(self) -> list[list[int]]:
        return children_of(self.parents)

    @classmethod
    def from_parents(cls, parents) -> "TreeLayout":
        """The layout of `parents`; built once per shape (a drafter proposes the same few
        shapes round after round) and shared: its tensors are never written."""
        return _layout(tuple(int(a) for a in parents))

    @classmethod
    def build(cls, parents: tuple[int, ...]) -> "TreeLayout":
        n = len(parents)
        above: list[list[int]] = [[0]]  # verify rows each row sees: itself and its ancestors
        depth = [0]
        for i, a in enumerate(parents):
            if not -1 <= a < i:
                raise ValueError(
                    f"tree node {i} has parent {a}: parents must come first (−1 <= parents[i] < i)"
                )
            above.append(above[a + 1] + [i + 1])
            depth.append(depth[a + 1] + 1)
        anc = torch.zeros(n + 1, n + 1, dtype=torch.bool)
        rows = [r for r, cols in enumerate(above) for _ in cols]
        anc[rows, [c for cols in above for c in cols]] = True
        return cls(parents, torch.tensor(depth), anc)

    @classmethod
    def from_paths(cls, paths) -> tuple["TreeLayout", list[tuple[int, ...]]]:
        """A static tree given as paths of child ranks (Medusa's `medusa_choices` form).

        Returns the layout and the paths in node order (by depth, then rank): node i is
        path order[i]. Every prefix of a path must be a path too.
        """
        order, parents = parents_from_paths([tuple(p) for p in paths])
        return cls.from_parents(parents), order

    @classmethod
    def chain(cls, n: int) -> "TreeLayout":
        """x_1..x_n as a tree: node i's parent is node i − 1."""
        return cls.from_parents(range(-1, n - 1))


@functools.lru_cache(maxsize=4096)
def _layout(parents: tuple[int, ...]) -> TreeLayout:
    return TreeLayout.build(parents)


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
        return children_of(self.parents)

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


def accept_tree(
    p: torch.Tensor, tree: Tree, generator: torch.Generator | None
) -> tuple[list[int], int]:
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


def accept(
    logits: torch.Tensor, tree: Tree, sampling: SamplingParams, generator: torch.Generator | None
) -> tuple[list[int], int]:
    """The tree rule for a run's sampling: greedy at T = 0, recursive rejection otherwise.
    logits (n+1, V), row 0 the root → (accepted path as node indices, the token after it)."""
    if sampling.greedy:
        return accept_tree_greedy(logits, tree)
    return accept_tree(probs(logits, sampling), tree, generator)
