"""A fixed k as a policy: the sizes the knobs give, behind the interface k=auto's policies answer
(chain.Chooser, tree.TreeChooser, tree.NodeRates), so that a method asks its policy the same
questions whatever k is and nothing adapts where nothing should.

    FixedChain(k)                           # a chain: k tokens a round (fewer where fewer exist)
    FixedTree(depth, top_k, total_tokens)   # a tree: every node its drafter makes, up to
                                            # total_tokens, no deeper than depth
A fixed tree whose node budget comes from the cost curve (EAGLE's `total_tokens: auto`) keeps
the ratio and re-chooses on the run's warm curve (calibrate → True when the size moved). Nothing
is learned: `learn`, `reset` and `ready` do nothing, the run measures no drafting cost for it
(`priced`), and its summary is its sizes.
"""

from __future__ import annotations

from methods.auto.costs import Plan, Policy, affordable


class Fixed(Policy):
    """What a fixed size answers alike for chains and trees."""

    def calibrate(self, curve: dict, step_s=0.0, round_s=0.0, overhead_s=0.0) -> bool:
        return False

    def priced(self, measure, curve: dict) -> tuple[dict, tuple]:
        return curve, (0.0, 0.0, 0.0)

    def ready(self, provisional, key: tuple | None = None) -> None:
        pass

    def round_done(self, proposal, acc, seconds=None, verify_s=None) -> None:
        pass

    def skip(self) -> bool:
        """A plain round instead of drafting? Never: a fixed size drafts every round."""
        return False

    def summary(self) -> dict:
        return {"kind": type(self).__name__, "limits": self.limits()}


class Always:
    """A chain round's walk that never stops early (Chooser.walk's fixed counterpart)."""

    def go(self, conf_of) -> bool:
        return True

    def plan(self) -> Plan:
        return Plan()


class FixedChain(Fixed):
    def __init__(self, k: int):
        self.max_k = k

    def length(self, bucket=None, cap: int | None = None) -> int:
        return self.max_k if cap is None else min(self.max_k, cap)

    def walk(self, bucket=None) -> Always:
        return Always()

    def limits(self) -> dict:
        return {"k": self.max_k}


class FixedTree(Fixed):
    """depth: drafter steps a round (at most total_tokens: a path of d nodes needs d of the
    budget); top_k: children per expanded node (None: the drafter's template decides);
    total_tokens: the nodes verified; ratio: where the budget is the largest forward costing
    at most ratio × a plain step (affordable), re-chosen on the run's curve."""

    def __init__(self, depth: int, top_k: int | None, total_tokens: int, ratio=None, curve=None):
        self.asked_depth, self.top_k, self.ratio, self.curve = depth, top_k, ratio, curve
        self.fit(total_tokens)

    def fit(self, total_tokens: int) -> None:
        self.max_nodes = total_tokens
        self.depth = min(self.asked_depth, total_tokens)

    def calibrate(self, curve: dict, step_s=0.0, round_s=0.0, overhead_s=0.0) -> bool:
        if self.ratio is None:
            return False
        old = (self.max_nodes, self.depth)
        self.curve = curve
        self.fit(max(affordable(curve, self.ratio) - 1, 1))  # the root rides in the same forward
        return (self.max_nodes, self.depth) != old

    # --- a scored tree (EAGLE, suffix): every node, in the drafter's own order ---
    def lam(self, depth: int) -> float:
        return 1.0

    def deeper(self, est_sorted: list[float], frontier: list[float], steps: int) -> int:
        return len(frontier)

    def size(self, est_sorted: list[float], steps: int) -> int:
        return min(len(est_sorted), self.max_nodes)

    def note(self, n: int, steps: int) -> None:
        pass

    def calibrated(self, raw: list[float], parents: list[int], depths: list[int]) -> list[float]:
        return list(raw)

    def order(self, est: list[float]) -> list[int]:
        return list(range(len(est)))

    # --- a template (Medusa, Token Recycling): every node the drafter could fill ---
    def choose(self, steps: int, allowed: list[int] | None = None) -> list[int]:
        return list(range(self.max_nodes)) if allowed is None else list(allowed)

    def limits(self) -> dict:
        out = {"depth": self.depth, "top_k": self.top_k, "total_tokens": self.max_nodes}
        if self.ratio is not None:
            out["budget_ratio"] = self.ratio
            out["verify_cost_ms"] = {n: round(c * 1e3, 2) for n, c in (self.curve or {}).items()}
        return out
