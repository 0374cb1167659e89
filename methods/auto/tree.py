"""k=auto for a scored draft (a tree, or a chain whose nodes carry probabilities): the n best
nodes by calibrated reach maximising (1 + Σ ŝ)/T(n), whether to draft one more depth, and
whether to draft at all (the running realized gain)."""

from __future__ import annotations

from methods.auto.chain import best_chain
from methods.auto.costs import Costs, Policy, running_mean
from methods.auto.rates import (
    DECAY,
    PRIOR,
    PRIOR_WEIGHT,
    PROBE_EVERY,
    PROBE_MAX,
    Probes,
    depths_of,
    fade,
    per_depth,
)

GAIN_START = 1.1  # a learned tree drafter's running gain before its first round: it drafts
GAIN_MEAN = 0.95  # weight of the past in that running mean (about twenty rounds)
PROBE_PULL = 0.3  # the share of the way a probe's gain moves that mean
PLAIN_MEAN = 0.8  # weight of the past in the mean of plain rounds' seconds (about five rounds)
REFERENCE_EVERY = 16  # drafted rounds in a row after which one round is plain, for reference
RHO_MIN, RHO_MAX = 0.5, 5.0  # the range one round's measured ρ is clipped to
GAIN_CONSTANTS = {  # the fixed numbers of a tree policy's rule (its summary's `constants`)
    "PRIOR_WEIGHT": PRIOR_WEIGHT, "DECAY": DECAY, "PROBE_EVERY": PROBE_EVERY,
    "PROBE_MAX": PROBE_MAX, "GAIN_MEAN": GAIN_MEAN, "PROBE_PULL": PROBE_PULL,
    "PLAIN_MEAN": PLAIN_MEAN, "REFERENCE_EVERY": REFERENCE_EVERY, "RHO_MIN": RHO_MIN,
    "RHO_MAX": RHO_MAX,
}  # fmt: skip


def best_prefix(reach: list[float], costs: Costs, steps: int) -> int:
    """Nodes sorted by reach probability, best first: how many to verify, n* = argmax
    (1 + Σ_{i<n} reach_i)/T(n) over 0..len(reach), the drafter's `steps` already paid."""
    best_n, best = 0, 1.0 / costs.round(0, steps)
    e = 1.0
    for n, s in enumerate(reach, 1):
        e += s
        rate = e / costs.round(n, steps)
        if rate > best * (1 + 1e-9):
            best_n, best = n, rate
    return best_n


class Gain:
    """Whether a learned drafter should draft at all this round (before its first step): the
    recent drafted rounds' realized tokens per second over a plain round's, a running mean over
    about twenty rounds; below 1, rounds are plain until a probe is due (Probes), and a probe's
    gain moves the mean PROBE_PULL of the way. A drafted round's gain is ~2 or ~0.85 (its
    first token accepted or not), so a short mean, or a probe's gain replacing it, crossed 1 on
    a few rejections and then let one probe decide the next 8-32 rounds: an EAGLE head that paid
    1.04-1.16x drafting every round was left plain in 58-86% of its rounds, at 0.99-1.04x.
    Realized, not expected: a round's gain is read after
    its verify from the tokens it yielded (1 + accepted) over the seconds the decode loop
    measured it taking (its draft, verify and accept), against the running mean of plain
    rounds' seconds, for rounds that follow a drafted round; after plain rounds (a probe, whose
    drafter first catches up on them) and where the loop measures no time (a GPU's events are
    read once at the end) the cost model's T(n) stands in. Each measured drafted round also
    refits the model's ρ (Costs.extra), so the sizes the next rounds choose price drafting as
    it is measured.
    The plain reference is kept current: while the drafter pays, one round in REFERENCE_EVERY
    drafted ones is plain and measured (where the loop times rounds). Without it a drafter
    that never stopped compared its rounds with the model's plain round, the curve anchored
    once after warm-up: on a 2-core Xeon 8.2 ms where the loop's plain verifies took 7.1-7.7,
    so EAGLE drafted nearly every round of translation at a realized gain of 1.2-1.3 that
    the same rounds over the loop's plain rounds (~7.4 ms) put at 0.99-1.03 (one prompt) and
    0.90 (the other), and the task read 0.96x."""

    def __init__(self):
        self.gain, self.probes, self.probing = GAIN_START, Probes(), False
        self.pending = None  # (nodes verified, drafter steps, costs) of the round in flight
        self.plain_s = None  # running mean of plain rounds' measured seconds
        self.steady = False  # the last round drafted (this one pays no catch-up)
        self.timed = False  # the loop measures rounds (reference rounds are worth their cost)
        self.since_plain = 0  # drafted rounds since the last plain one

    def skip(self) -> bool:
        if self.gain >= 1.0 and self.timed and self.since_plain >= REFERENCE_EVERY:
            self.probing = False
            return True  # a reference round: not a switch-off, the probes' wait untouched
        self.probing = self.gain < 1.0 and self.probes.due()
        if self.gain >= 1.0 or self.probing:
            self.probes.drafted(merit=not self.probing)
            return False
        self.probes.plain()
        return True

    def note(self, n: int, steps: int, costs: Costs) -> None:
        """A drafted round's plan: n nodes to verify after `steps` drafter steps."""
        self.pending = (n, steps, costs)

    def realized(self, accepted: int, seconds: float | None = None) -> None:
        """After the verify: a plain round's seconds join their mean; a drafted round's gain
        (1 + accepted)/seconds ÷ 1/plain seconds joins the gain's, and refits ρ. A drafted
        round after plain ones (a probe) first catches the drafter up on them, paid once per
        run of plain rounds and not by steady drafting: its seconds are the model's (ρ
        included). (Its expected tokens, 1 + the nodes' calibrated reach, were tried in place
        of the accepted ones and measured worse: Medusa's node estimates
        ran high, and its probes switched it back on into losing rounds, 0.91× on make bench
        against 0.97×.)"""
        steady, self.steady = self.steady, self.pending is not None
        self.timed = self.timed or bool(seconds)
        if self.pending is None:
            self.since_plain = 0
            if seconds:
                self.plain_s = running_mean(self.plain_s, seconds, PLAIN_MEAN)
            return
        self.since_plain += 1
        n, steps, costs = self.pending
        self.pending = None
        plain = self.plain_s or costs.round(0, 0)
        if seconds and steady:
            model = costs.drafting(n, steps)
            if model > 0:
                rho = min(max((seconds - plain) / model, RHO_MIN), RHO_MAX)
                costs.extra = running_mean(costs.extra, rho, GAIN_MEAN)
            g = (1.0 + accepted) / seconds * plain
        else:
            g = (1.0 + accepted) / costs.round(n, steps) * costs.round(0, 0)
        self.gain = running_mean(self.gain, g, 1 - PROBE_PULL if self.probing else GAIN_MEAN)


class TreeChooser(Policy):
    """k=auto for a scored draft (a tree, or a chain whose nodes carry probabilities): how many
    of the best nodes to verify, and (learned drafters) whether to draft one more depth.

    A node's raw reach r is its path's draft probability (EAGLE: the product of the head's
    probabilities; suffix: the index's frequency ratios). ŝ = min(λ_depth · r, ŝ_parent), with
    λ_depth = (rounds whose accepted path reached depth + w) / (Σ r of the verified nodes at that
    depth + w): the nodes of one depth are disjoint events, so Σ r estimates the chance the path
    gets there. Sorted best first (ties: creation order), any prefix is a tree."""

    def __init__(self, max_nodes: int, max_depth: int, prior: list[float] | float | None = None):
        self.max_nodes, self.max_depth = max_nodes, max_depth
        # a learned drafter's held-out acceptance by depth (rates.trained_prior): its rounds
        # draft no deeper than the chain the rule picks with it on the run's costs (calibrate)
        self.prior, self.depth = prior, max_depth
        self.reset()

    def calibrate(self, curve: dict, step_s=0.0, round_s=0.0, overhead_s=0.0) -> bool:
        super().calibrate(curve, step_s, round_s, overhead_s)
        if self.prior is not None:
            self.depth = rule_depth(self.prior, self.costs, self.max_depth)
        return False

    def reset(self) -> None:
        self.reached = [0.0] * (self.max_depth + 1)
        self.predicted = [0.0] * (self.max_depth + 1)
        self.gains = Gain()

    def skip(self) -> bool:
        return not self.forced and self.gains.skip()

    def note(self, n: int, steps: int) -> None:
        self.gains.note(n, steps, self.costs)

    def lam(self, depth: int) -> float:
        d = min(depth, self.max_depth)
        return (self.reached[d] + PRIOR_WEIGHT) / (self.predicted[d] + PRIOR_WEIGHT)

    def calibrated(self, raw: list[float], parents: list[int], depths: list[int]) -> list[float]:
        """ŝ per node (parents listed before their children)."""
        out = []
        for r, p, d in zip(raw, parents, depths):
            s = min(self.lam(d) * r, 1.0)
            out.append(min(s, out[p]) if p >= 0 else s)
        return out

    def order(self, est: list[float]) -> list[int]:
        """Node indices best first, ties by creation order (a parent before its children)."""
        return sorted(range(len(est)), key=lambda i: (-est[i], i))

    def size(self, est_sorted: list[float], steps: int) -> int:
        """Nodes to verify from estimates sorted best first, the drafter's `steps` paid; forced
        (force_drafting) at least the best node, as a forced chain drafts its best k ≥ 1."""
        n = best_prefix(est_sorted[: self.max_nodes], self.costs, steps)
        return max(n, 1) if self.forced and est_sorted and self.max_nodes else n

    def deeper(self, est_sorted: list[float], frontier: list[float], steps: int) -> int:
        """Early stop and frontier width: can one more drafter step (its new nodes reaching at
        most `frontier`'s estimates, the frontier's children being no likelier than their
        parents) raise E/T? Returns how many of the frontier's best nodes that step should
        expand: the j whose j best bounds, added, would raise E/T the most (children of the
        others could only join a tree that pays less); 0: stop here."""
        c = self.costs
        n = self.size(est_sorted, steps)
        e = 1.0 + sum(est_sorted[:n])
        best, width = e / c.round(n, steps), 0
        gain = sorted(frontier, reverse=True)[: max(self.max_nodes - n, 0)]
        e2 = e
        for j, g in enumerate(gain, 1):
            e2 += g
            ratio = e2 / c.round(n + j, steps + 1)
            if ratio > best:
                best, width = ratio, j
        return width

    def learn(self, proposal, acc, seconds: float | None = None) -> None:
        self.gains.realized(acc.n_draft_accepted, seconds)
        reach = proposal.plan.reach
        if reach is None or not len(proposal.tokens):
            return
        depth = proposal.layout.depth
        fade(self.predicted)
        fade(self.reached)
        for i, r in enumerate(reach[: proposal.n_draft]):
            d = min(int(depth[i + 1]), self.max_depth)
            self.predicted[d] += r
        for d in range(1, min(acc.n_draft_accepted, self.max_depth) + 1):
            self.reached[d] += 1

    def limits(self) -> dict:
        """max_depth: the knob; rule_depth: the chain the rule picks with the drafter's
        held-out acceptance on the run's measured costs (the deepest a round drafts)."""
        return {"max_nodes": self.max_nodes, "max_depth": self.max_depth,
                "rule_depth": self.depth}  # fmt: skip

    def priors(self) -> dict:
        """The held-out acceptance by depth rule_depth reads (None: a drafter without one),
        λ per depth before any round (PRIOR_WEIGHT pseudo-rounds at 1), the gain's start."""
        alpha = (
            None
            if self.prior is None
            else [round(a, 3) for a in per_depth(self.prior, self.max_depth)]
        )
        return {"alpha": alpha, "lambda": [1.0] * self.max_depth, "gain": GAIN_START}

    def learned(self) -> dict:
        return {"lambda": [round(self.lam(d), 3) for d in range(1, self.max_depth + 1)],
                "gain": round(self.gains.gain, 3)}  # fmt: skip

    def constants(self) -> dict:
        return GAIN_CONSTANTS


def rule_depth(prior: list[float] | float, costs: Costs, max_depth: int) -> int:
    """The deepest a learned drafter's rounds may draft: k* = argmax E(k)/T(k) over chains of
    1..max_depth (methods.auto.chain.best_chain), α_j its held-out acceptance at depth j
    (rates.per_depth), one drafter step a token, on the run's costs;
    at least 1, so that the round-by-round choice still sees its first depth. Where a verify's
    extra rows and a drafter step cost little (a GPU's flat curve) the cap stays deep; where
    they cost a large share of a step (a 2-core Xeon: each extra row ~0.1-0.2 of a step, each
    head step ~0.1-0.2) it is one: the per-round choice over deeper trees, scored by calibrated
    draft probabilities, drafted trees there that accepted less than they cost
    (docs/decode_step.md)."""
    return max(best_chain(per_depth(prior, max_depth), costs, max_depth, 1), 1)


class NodeRates(Policy):
    """k=auto for a fixed tree template (Medusa's, Token Recycling's): each round verifies the
    template's best n nodes, n maximising (1 + Σ ŝ)/T(n), a node's ŝ its measured share of
    the rounds that verified it in which the accepted path went through it (never above its
    parent's), every node always ranked after its parent. Its prior: the drafter's own per-node
    reach where it has one (Medusa's trained heads: the product of their held-out rank
    accuracies along the node's path), else PRIOR^depth."""

    def __init__(self, parents: list[int], max_nodes: int, prior: float | list = PRIOR):
        self.parents = list(parents)
        self.depth = depths_of(self.parents)
        if isinstance(prior, (list, tuple)):
            if len(prior) != len(self.parents):
                raise ValueError(f"{len(prior)} node priors for {len(self.parents)} nodes")
            self.prior = [min(max(float(p), 0.0), 1.0) for p in prior]
        else:
            self.prior = [prior**d for d in self.depth]
        self.max_nodes = max_nodes
        self.reset()

    def reset(self) -> None:
        n = len(self.parents)
        self.verified, self.accepted = [0.0] * n, [0.0] * n
        self.gains = Gain()

    def skip(self) -> bool:
        return not self.forced and self.gains.skip()

    def estimates(self) -> list[float]:
        w, out = PRIOR_WEIGHT, []
        for i, p in enumerate(self.parents):
            s = (self.accepted[i] + w * self.prior[i]) / (self.verified[i] + w)
            out.append(min(s, out[p]) if p >= 0 else s)
        return out

    def choose(self, steps: int, allowed: list[int] | None = None) -> list[int]:
        """Template nodes to verify (ascending, prefix-closed), among `allowed` (a
        prefix-closed subset the drafter could fill; None: all)."""
        est = self.estimates()
        ids = range(len(est)) if allowed is None else allowed
        order = sorted(ids, key=lambda i: (-est[i], self.depth[i], i))[: self.max_nodes]
        ranked = [est[i] for i in order]
        n = best_prefix(ranked, self.costs, steps)
        if self.forced and ranked:  # force_drafting: at least the best node
            n = max(n, 1)
        if n:  # none chosen: the drafter is not run (Medusa's heads), a plain round
            self.gains.note(n, steps, self.costs)
        return sorted(order[:n])

    def learn(self, proposal, acc, seconds: float | None = None) -> None:
        self.gains.realized(acc.n_draft_accepted, seconds)
        nodes = proposal.plan.nodes  # the template ids of the verified nodes
        if nodes is None:
            return
        path = set(acc.seen[0]) if acc.seen else set()
        fade(self.verified)
        fade(self.accepted)
        for j, t in enumerate(nodes):
            self.verified[t] += 1
            if j in path:
                self.accepted[t] += 1

    def limits(self) -> dict:
        return {"max_nodes": self.max_nodes, "nodes": len(self.parents)}

    def priors(self) -> dict:
        """Each template node's reach before any round (the drafter's own, else PRIOR^depth),
        the gain's start."""
        return {"node_reach": [round(p, 3) for p in self.prior], "gain": GAIN_START}

    def learned(self) -> dict:
        return {"node_reach": [round(p, 3) for p in self.estimates()],
                "gain": round(self.gains.gain, 3)}  # fmt: skip

    def constants(self) -> dict:
        return GAIN_CONSTANTS


def subtree(parents: list[int], keep: list[int]) -> list[int]:
    """The parents of the kept nodes (ascending, prefix-closed) renumbered among themselves."""
    index = {j: i for i, j in enumerate(keep)}
    return [index[parents[j]] if parents[j] >= 0 else -1 for j in keep]
