"""Static draft tree shapes as data: named trees, and trees sized from measured head accuracies.

A tree is a list of paths; a path lists, per depth d, the rank of the candidate taken at that
depth (Medusa's `medusa_choices` form): for Medusa, [0] is head 0's top-1 and [0, 1] head 1's
second candidate placed after it; for Token Recycling (methods.recycling), [0, 1] is the second
stored successor of the first stored successor of the root token. Every prefix of a path is also
in the tree. `groundfloor.tree.TreeLayout.from_paths` turns one into a layout.
"""

from __future__ import annotations

import heapq

TREES = {
    # top-1 of every head: a chain
    "chain": [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0]],
    # 8 nodes: wide at depth 1, where the heads are most accurate
    "small": [[0], [1], [2], [0, 0], [1, 0], [0, 1], [0, 0, 0], [0, 0, 0, 0]],
    # 16 nodes
    "medium": [
        [0],
        [1],
        [2],
        [3],
        [0, 0],
        [0, 1],
        [1, 0],
        [2, 0],
        [0, 2],
        [0, 0, 0],
        [0, 0, 1],
        [0, 1, 0],
        [1, 0, 0],
        [0, 0, 0, 0],
        [0, 0, 0, 1],
        [0, 0, 0, 0, 0],
    ],
}


def sized_tree(rank_accuracy: list[list[float]], size: int, depth: int) -> list[list[int]]:
    """The `size` paths of highest expected acceptance, assuming independent heads.

    rank_accuracy[d][r] = P(head d's rank-r candidate is the target's token), measured on held-out
    data. A path's acceptance probability is Π_d rank_accuracy[d][path[d]]; best-first search
    keeps the tree prefix-closed since extending a path never raises its probability.
    """
    depth = min(depth, len(rank_accuracy))
    heap = [(-rank_accuracy[0][r], (r,)) for r in range(len(rank_accuracy[0]))]
    heapq.heapify(heap)
    chosen = []
    while heap and len(chosen) < size:
        neg, path = heapq.heappop(heap)
        chosen.append(list(path))
        d = len(path)
        if d < depth:
            for r in range(len(rank_accuracy[d])):
                heapq.heappush(heap, (neg * rank_accuracy[d][r], path + (r,)))
    return chosen


def path_reach(paths, rank_accuracy) -> list[float] | None:
    """Each path's acceptance probability as sized_tree scores it, Π_d rank_accuracy[d][path[d]]
    (k=auto's prior reach of a static tree's nodes: sibling ranks get their own, lower rates,
    where PRIOR^depth gave every sibling its parent's); None where there are no accuracies or
    a path reaches a head or rank they lack."""
    if not rank_accuracy:
        return None
    out = []
    for path in paths:
        reach = 1.0
        for head, rank in enumerate(path):
            if head >= len(rank_accuracy) or rank >= len(rank_accuracy[head]):
                return None
            reach *= float(rank_accuracy[head][rank])
        out.append(reach)
    return out


def resolve(tree, rank_accuracy, size: int, depth: int, num_heads: int) -> list[list[int]]:
    """A tree from config: a name in TREES, 'auto' (sized from accuracies), or a list of paths;
    paths deeper than `depth` or than the available heads are dropped."""
    if isinstance(tree, str):
        if tree == "auto":
            if not rank_accuracy:
                raise ValueError("tree=auto needs heads with measured rank_accuracy in config.json")
            paths = sized_tree(rank_accuracy, size, min(depth, num_heads))
        elif tree in TREES:
            paths = TREES[tree]
        else:
            raise KeyError(tree)
    else:
        paths = [list(p) for p in tree]
    return [p for p in paths if len(p) <= min(depth, num_heads)]
