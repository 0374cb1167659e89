"""Forced acceptance for tree methods: rewrite the tokens of a method's own drafted tree so that
nodes are right (the target's greedy continuation along their root path) at a chosen rate.

The method keeps its own tree shape, its own state and its own after-accept code (head caches,
pending features, KV rollback), so its verify/accept paths run on deep accepted paths and on
rejections part-way down, which random heads on a tiny model almost never reach."""
from __future__ import annotations

import dataclasses

import torch


def depths(parents: list[int]) -> list[int]:
    out: list[int] = []
    for a in parents:
        out.append(1 if a < 0 else out[a] + 1)
    return out


def mostly_right(m, full: list[int], vocab: int, rate: float, seed: int = 0) -> dict:
    """Wrap m.draft: each node gets the right token with probability `rate`, else a wrong one.
    `full` is prompt + the ar output, long enough to cover the deepest node of the last round.
    Returns counters filled as the method runs: rounds, and the depth of the right path the
    rewritten tree holds (the most a correct accept rule can take) per round."""
    orig, g = m.draft, torch.Generator().manual_seed(seed)
    seen = {"rounds": 0, "best": []}

    def draft(state):
        prop = orig(state)
        parents = list(prop.layout.parents)
        if not parents:
            return prop
        d = depths(parents)
        at = state.length  # full[at + depth − 1]: the right token at that depth
        draw = (torch.rand(len(parents), generator=g) < rate).tolist()
        right, tokens, sib = [False] * len(parents), [], {}
        for i, a in enumerate(parents):  # siblings hold distinct tokens, as any drafter's do:
            j = sib.get(a, 0)            # at most one of them is right
            sib[a] = j + 1
            taken = any(right[c] for c in range(i) if parents[c] == a)
            right[i] = draw[i] and not taken
            want = full[at + d[i] - 1]
            tokens.append(want if right[i] else (want + 1 + j) % vocab)
        ok = [False] * len(parents)  # node and all its ancestors right
        for i, a in enumerate(parents):
            ok[i] = bool(right[i]) and (a < 0 or ok[a])
        seen["rounds"] += 1
        seen["best"].append(max([d[i] for i in range(len(parents)) if ok[i]], default=0))
        return dataclasses.replace(prop, tokens=torch.tensor(tokens, dtype=torch.long,
                                                            device=prop.tokens.device))
    m.draft = draft
    return seen


def check_forced(res, seen, n: int) -> None:
    """Each round takes exactly the right path's depth (capped by the token budget): accepted
    from below as well as from above, with deep accepts and part-way rejections both seen."""
    took = res.round_accepted
    best = seen["best"][: len(took)]
    for i, (a, b) in enumerate(zip(took, best)):
        assert a == b or (i == len(took) - 1 and a < b), (i, took, best)
    assert res.accepted_tokens >= sum(best[:-1]) > 0
    assert any(a >= 2 for a in took), took  # deep paths were taken
    assert len(res.output_ids) == n
