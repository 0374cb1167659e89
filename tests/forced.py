"""Forced acceptance for tree methods: rewrite the tokens of a method's own drafted tree so that
chosen nodes are right (the target's greedy continuation along their root path) and every other
node is wrong.

The method keeps its own tree shape, its own state and its own after-accept code (head caches,
pending features, KV rollback), so its verify/accept paths run on deep accepted paths and on
rejections part-way down, which random heads on a tiny model almost never reach."""

from __future__ import annotations

import dataclasses

import torch


def on_path(layout, i: int) -> list[int]:
    """Node i and its ancestors (from the layout's verify-row ancestor matrix)."""
    return [j for j in range(layout.size) if layout.ancestors[i + 1, j + 1]]


def rewrite(m, full: list[int], vocab: int, choose) -> None:
    """Wrap m.draft: choose(layout) → which nodes hold the right token (one bool per node; it is
    called on empty trees too). A wrong token differs from its siblings', as any drafter's do.
    `full` is prompt + the ar output, long enough to cover the deepest node of the last round."""
    orig = m.draft

    def draft(state):
        prop = orig(state)
        right = choose(prop.layout)
        if not right:
            return prop
        depth = prop.layout.depth[1:].tolist()
        rank = {c: j for kids in prop.layout.children() for j, c in enumerate(kids)}
        at = state.length  # full[at + depth − 1]: the right token at that depth
        tokens = [
            full[at + d - 1] if ok else (full[at + d - 1] + 1 + rank[i]) % vocab
            for i, (d, ok) in enumerate(zip(depth, right))
        ]
        return dataclasses.replace(
            prop, tokens=torch.tensor(tokens, dtype=torch.long, device=prop.tokens.device)
        )

    m.draft = draft


def mostly_right(m, full: list[int], vocab: int, rate: float, seed: int = 0) -> dict:
    """Each node is right with probability `rate` (at most one per sibling group). Returns what
    the rounds held, filled as the method runs: per round the depth of the right path (the most a
    correct accept rule can take), and the deepest tree drafted."""
    g = torch.Generator().manual_seed(seed)
    seen = {"best": [], "max_depth": 0}

    def choose(layout):
        draw = (torch.rand(layout.size, generator=g) < rate).tolist()
        right, has_right = [], set()
        for i, a in enumerate(layout.parents):
            right.append(draw[i] and a not in has_right)
            if right[i]:
                has_right.add(a)
        depth = layout.depth[1:].tolist()
        seen["best"].append(
            max(
                [depth[i] for i in range(layout.size) if all(right[j] for j in on_path(layout, i))],
                default=0,
            )
        )
        seen["max_depth"] = max([seen["max_depth"]] + depth)
        return right

    rewrite(m, full, vocab, choose)
    return seen


def planted(m, full: list[int], vocab: int) -> list[tuple[int, bool]]:
    """Only one root path is right: the one to the deepest node off the first-child chain (or,
    in a chain, the deepest node). At T = 0 only that path can be accepted, to its end. Returns
    per round (the path's depth, whether it leaves the first-child chain)."""
    picked = []

    def choose(layout):
        if not layout.size:  # nothing drafted this round (recycling before its matrix fills)
            picked.append((0, False))
            return []
        first = {kids[0] for kids in layout.children() if kids}
        depth = layout.depth[1:].tolist()
        off_chain = [
            i for i in range(layout.size) if any(j not in first for j in on_path(layout, i))
        ]
        leaf = max(off_chain or range(layout.size), key=lambda i: (depth[i], i))
        path = set(on_path(layout, leaf))
        picked.append((depth[leaf], bool(off_chain)))
        return [i in path for i in range(layout.size)]

    rewrite(m, full, vocab, choose)
    return picked


def check_forced(res, seen, n: int) -> None:
    """Each round takes exactly the right path's depth (capped by the token budget): accepted
    from below as well as from above, with deep accepts (when the tree is deep) and part-way
    rejections both seen."""
    took = res.round_accepted
    best = seen["best"][: len(took)]
    for i, (a, b) in enumerate(zip(took, best)):
        assert a == b or (i == len(took) - 1 and a < b), (i, took, best)
    assert res.accepted_tokens >= sum(best[:-1]) > 0
    if seen["max_depth"] >= 2:
        assert any(a >= 2 for a in took), took  # deep paths were taken
    assert len(res.output_ids) == n


def run_forced(
    m, ar, prompt: list[int], run, n: int = 40, rate: float = 0.6, seed: int = 0, vocab: int = 128
) -> None:
    """m's greedy output on `prompt` with its trees right at `rate`: exact, and each round takes
    the right path (check_forced). `run(method, prompt, n=...)` generates greedily."""
    full = prompt + run(ar, prompt, n=n + 10).output_ids
    seen = mostly_right(m, full, vocab, rate, seed)
    res = run(m, prompt, n=n)
    assert res.output_ids == full[len(prompt) : len(prompt) + n]
    check_forced(res, seen, n)
