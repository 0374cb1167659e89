"""`k=auto`: each round drafts the length (or tree size) that maximises expected tokens per second.

A round that drafts k tokens and verifies them in one target forward costs

    T(k) = c(k + 1) + s(k)·d + r          (T(0) = c(1) + r: a plain decoding step)

c: the run's cost curve (engines.probe, timed after warm-up; linear between the sizes it timed),
d: the drafter's cost per sequential step, s(k): its steps for k tokens (a draft model: k, a lookup:
0), r: the drafting work paid every round whatever k (a lookup, a head's catch-up). d and r are
measured on the run's warm-up turns' steady rounds (`draft_costs`), never assumed. The round emits

    E(k) = 1 + Σ_{i=1..k} Π_{j=1..i} α_j

tokens in expectation, α_j the conditional acceptance at depth j (x_j accepted given x_1..x_{j−1}
were), kept per context bucket (n-gram methods: the match length) from the run's own rounds,
shrunk towards the pooled rate and a prior while a bucket has few rounds, every count fading by
DECAY per round so the rates follow the text at hand. The round drafts
k* = argmax_{0 ≤ k ≤ max_k} E(k)/T(k); k* = 0 is a plain step. A run that stays at 0 for
`PROBE_EVERY` rounds drafts k* over k ≥ 1 once, so its rates keep being measured; each probe
that leaves speculation off doubles the wait before the next (up to PROBE_MAX), so a drafter that
does not pay on the text at hand costs ever less, and a round that drafts on its merits resets it.

Trees score nodes instead: a node's reach probability ŝ (its path's draft probability, times a
per-depth calibration λ_depth fitted from the accepted paths), and the round keeps the n best
(a prefix-closed choice) maximising (1 + Σ ŝ)/T(n). Learned drafters stop extending early when the
next step's expected gain (its reach times its calibrated confidence) cannot raise E/T, and a tree
drafter skips drafting (a plain round) while its recent rounds' realized gain (the tokens they
yielded per modelled second) is below a plain step's, drafting again after PROBE_EVERY such
rounds (the same doubling wait), a probe's gain replacing the stale running mean.

The choice for a round reads only earlier rounds and this round's draft, never the target's
verdict on it, so every accept rule stays lossless (tests/test_adaptive.py checks the law at T=1).
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path

AUTO = "auto"  # the value of k that turns the policy on
PRIOR = 0.5  # conditional acceptance per depth before a run has rounds (a drafter may pass its own)
PROBE_EVERY = 8  # plain rounds in a row after which one round drafts again (keeps α measured)
PROBE_MAX = 32  # the longest wait between probes (a probe that leaves speculation off doubles it)
DECAY = 0.98  # per recorded round: counts fade over ~50 rounds, so rates follow the text at hand
PRIOR_WEIGHT = 2.0  # pseudo-rounds behind the prior (and behind the pooled rate, for a bucket)
GAIN_START = 1.1  # a learned tree drafter's running gain before its first round: it drafts
GAIN_MEAN = 0.8  # weight of the past in that running mean (about five rounds)
BINS = 10  # confidence bins of a learned drafter's calibration


def fade(counts: list[float]) -> None:
    """Age running counts by one round (DECAY), in place."""
    for i in range(len(counts)):
        counts[i] *= DECAY


def trained_prior(directory) -> list[float] | float:
    """A trained drafter's held-out top-1 by position (train_summary.json, written by our
    training) as the prior of its acceptance by depth; PRIOR where it has none."""
    path = Path(directory) / "train_summary.json"
    try:
        top1 = json.loads(path.read_text()).get("top1_per_pos")
    except (OSError, ValueError):
        return PRIOR
    return [float(a) for a in top1] if top1 else PRIOR


class Costs:
    """c(q) from a timed curve {q: seconds}, with the drafter's measured costs."""

    def __init__(
        self, curve: dict, step_s: float = 0.0, round_s: float = 0.0, overhead_s: float = 0.0
    ):
        self.q = sorted(curve)
        self.c = [float(curve[q]) for q in self.q]
        self.step_s, self.round_s = float(step_s), float(round_s)
        self.overhead_s = max(float(overhead_s), 0.0)

    def verify(self, q: int) -> float:
        """Seconds of one target forward over q tokens, linear between timed sizes (and past
        the largest, along its last segment)."""
        xs, ys = self.q, self.c
        if len(xs) == 1:
            return ys[0] * q / xs[0]
        i = min(max(bisect.bisect_left(xs, q), 1), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return max(y0 + (y1 - y0) * (q - x0) / (x1 - x0), ys[0] * 0.5)

    def round(self, tokens: int, steps: int) -> float:
        """T: a round verifying `tokens` drafted tokens made in `steps` drafter steps."""
        return self.verify(tokens + 1) + steps * self.step_s + self.round_s + self.overhead_s


class Policy:
    """What every k=auto policy shares: the run's costs, set by `calibrate`, and their summary."""

    costs: Costs | None = None

    def calibrate(self, curve: dict, step_s=0.0, round_s=0.0, overhead_s=0.0) -> None:
        self.costs = Costs(curve, step_s, round_s, overhead_s)

    def cost_summary(self) -> dict:
        c = self.costs
        return {
            "c1_ms": None if c is None else round(c.verify(1) * 1e3, 3),  # the level it used
            "step_ms": None if c is None else round(c.step_s * 1e3, 3),
            "round_ms": None if c is None else round(c.round_s * 1e3, 3),
            "overhead_ms": None if c is None else round(c.overhead_s * 1e3, 3),
        }


def depths_of(parents: list[int]) -> list[int]:
    """Each node's depth (1: a child of the root), parents listed before their children."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


class Depths:
    """Conditional acceptance by depth, per bucket: counts of rounds that reached depth i with a
    drafted token there, and of those that accepted it."""

    def __init__(self, max_k: int, prior: list[float] | float = 0.5):
        self.max_k = max_k
        p = prior if isinstance(prior, list) else [prior]
        self.prior = [min(max(float(p[min(i, len(p) - 1)]), 0.01), 0.99) for i in range(max_k)]
        self.pool = ([0.0] * max_k, [0.0] * max_k)  # (reached, accepted)
        self.buckets: dict = {}

    def record(self, bucket, drafted: int, accepted: int) -> None:
        rows = [self.pool]
        if bucket is not None:
            rows.append(self.buckets.setdefault(bucket, ([0.0] * self.max_k, [0.0] * self.max_k)))
        for reached, acc in rows:
            fade(reached)
            fade(acc)
            for i in range(min(accepted + 1, drafted, self.max_k)):
                reached[i] += 1
                if i < accepted:
                    acc[i] += 1

    def alphas(self, bucket=None) -> list[float]:
        w = PRIOR_WEIGHT
        reached, acc = self.pool
        pooled = [(acc[i] + w * self.prior[i]) / (reached[i] + w) for i in range(self.max_k)]
        if bucket is None or bucket not in self.buckets:
            return pooled
        reached, acc = self.buckets[bucket]
        return [(acc[i] + w * pooled[i]) / (reached[i] + w) for i in range(self.max_k)]


def expected(alphas: list[float], k: int) -> float:
    """E(k) = 1 + Σ_{i≤k} Π_{j≤i} α_j."""
    e, reach = 1.0, 1.0
    for a in alphas[:k]:
        reach *= a
        e += reach
    return e


def best_chain(alphas: list[float], costs: Costs, max_k: int, steps_per_token: int) -> int:
    """k* = argmax_{0≤k≤max_k} E(k)/T(k) (ties: the shorter)."""
    best_k, best = 0, 1.0 / costs.round(0, 0)
    e, reach = 1.0, 1.0
    for k in range(1, max_k + 1):
        reach *= alphas[k - 1]
        e += reach
        rate = e / costs.round(k, k * steps_per_token)
        if rate > best * (1 + 1e-9):
            best_k, best = k, rate
    return best_k


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


class Confidence:
    """P(a drafted token is accepted | its depth was reached, the drafter's top probability),
    by probability bin; prior: the running rate at the token's depth."""

    def __init__(self):
        self.reached = [0.0] * BINS
        self.acc = [0.0] * BINS

    @staticmethod
    def _bin(p: float) -> int:
        return min(int(p * BINS), BINS - 1)

    def rate(self, p: float, prior: float) -> float:
        b = self._bin(p)
        return (self.acc[b] + PRIOR_WEIGHT * prior) / (self.reached[b] + PRIOR_WEIGHT)

    def record(self, confs: list[float], accepted: int) -> None:
        fade(self.reached)
        fade(self.acc)
        for i, p in enumerate(confs[: accepted + 1]):
            b = self._bin(p)
            self.reached[b] += 1
            if i < accepted:
                self.acc[b] += 1


class Probes:
    """When a run of plain rounds drafts once more: after `wait` plain rounds in a row, `wait`
    starting at PROBE_EVERY and doubling (up to PROBE_MAX) with every probe that leaves
    speculation off, back to PROBE_EVERY once a round drafts on its merits."""

    def __init__(self):
        self.wait, self.run = PROBE_EVERY, 0

    def due(self) -> bool:
        """This round would be plain: is it time to probe instead? (A probe doubles the wait.)"""
        if self.run < self.wait:
            return False
        self.wait = min(2 * self.wait, PROBE_MAX)
        return True

    def drafted(self, merit: bool) -> None:
        """A round drafted: on its merits (the wait resets) or as a probe."""
        self.run = 0
        if merit:
            self.wait = PROBE_EVERY

    def plain(self) -> None:
        self.run += 1


class Chooser(Policy):
    """One method's k=auto state: its costs, rates and the lengths it chose.

    ch = Chooser(max_k=8, steps_per_token=0)       # a lookup method
    ch.calibrate(curve, step_s, round_s)           # the run's warm curve and drafter cost
    k = ch.length(bucket)                          # before drafting
    ch.record(bucket, drafted, accepted)           # after the verify
    """

    def __init__(self, max_k: int, steps_per_token: int, prior: list[float] | float = 0.5):
        self.max_k, self.steps_per_token = max_k, steps_per_token
        self.depths = Depths(max_k, prior)
        self.conf = Confidence()
        self.prior = prior
        self.probes, self.probing = Probes(), False

    def reset(self) -> None:
        """Forget the rates (after warm-up: the measured turns start from the prior)."""
        self.depths = Depths(self.depths.max_k, self.prior)
        self.conf = Confidence()
        self.probes, self.probing = Probes(), False

    def length(self, bucket=None, cap: int | None = None) -> int:
        """The draft length for this round (0: draft nothing); `cap`: tokens available."""
        top = self.max_k if cap is None else min(cap, self.max_k)
        self.probing = False
        if top <= 0:
            return 0
        a = self.depths.alphas(bucket)
        s = self.steps_per_token
        k = best_chain(a, self.costs, top, s)
        if k == 0 and self.probes.due():  # measure again: the best k ≥ 1
            rates = [expected(a, j) / self.costs.round(j, j * s) for j in range(1, top + 1)]
            k, self.probing = 1 + rates.index(max(rates)), True
        return k

    def keep_going(self, e: float, reach: float, drafted: int, conf: float) -> bool:
        """Early stop: does drafting token `drafted + 1`, whose drafter top probability is
        `conf` (read before the token is drawn), raise E/T? e: the expected tokens of the
        `drafted` so far, reach: their joint acceptance estimate. A probing round drafts its
        first token whatever the confidence."""
        if self.probing and drafted == 0:
            return True
        c, s = self.costs, self.steps_per_token
        now = e / c.round(drafted, drafted * s)
        nxt = (e + reach * self.rate(conf, drafted)) / c.round(drafted + 1, (drafted + 1) * s)
        return nxt > now

    def rate(self, conf: float, drafted: int) -> float:
        """Acceptance of the next token: its confidence bin's measured rate, shrunk towards
        the running rate at its depth."""
        return self.conf.rate(conf, self.depths.alphas()[min(drafted, self.max_k - 1)])

    def learn(self, proposal, acc) -> None:
        self.record(proposal.bucket, acc.drafted, acc.n_draft_accepted, proposal.confs)

    def record(self, bucket, drafted: int, accepted: int, confs: list[float] | None = None):
        if not drafted:
            self.probes.plain()
            return
        self.probes.drafted(merit=not self.probing)
        self.depths.record(bucket, drafted, accepted)
        if confs:
            self.conf.record(confs, accepted)

    def summary(self) -> dict:
        return {
            "max_k": self.max_k,
            **self.cost_summary(),
            "alpha": [round(a, 3) for a in self.depths.alphas()],
        }


def base_step(turns) -> float | None:
    """s_b: the baseline's seconds per decoded token (after the first) on warm-up TurnResults."""
    decoded = sum(max(len(t.output_ids) - 1, 0) for t in turns)
    if not decoded:
        return None
    return sum((t.times_ns["wall"] - t.times_ns.get("ttft", 0)) / 1e9 for t in turns) / decoded


def step_overhead(step: float | None, curve: dict) -> float:
    """o: what the baseline's step s_b costs beyond c(1)."""
    return max(step - curve[min(curve)], 0.0) if step and curve else 0.0


def step_rounds(times, steps) -> tuple[float, int, float, int]:
    """One turn's per-round drafting times and drafter steps → (time, steps) of its steady rounds
    (after a drafted round), then (time, steps) of its drafted rounds after plain ones (a turn's
    first round excluded), whose time includes the drafter's catch-up on the plain tokens."""
    t = n = late_t = late_n = 0
    for i in range(1, min(len(times), len(steps))):
        if steps[i] and steps[i - 1]:
            t, n = t + times[i], n + steps[i]
        elif steps[i]:
            late_t, late_n = late_t + times[i], late_n + steps[i]
    return t, n, late_t, late_n


def draft_costs(turns) -> tuple[float, float]:
    """(seconds per drafter step, seconds per round outside them) from warm-up TurnResults'
    steady rounds. A learned drafter: the drafting time of its rounds that follow a drafted round
    over their steps (a turn's first round, or one after plain rounds, first catches the drafter
    up on the prompt or the run of plain tokens: paid whatever k, and the prompt once per turn,
    so it is no step's cost); a lookup: its rounds' drafting time over their count. The
    drafter's prefill (its own span) is left out too. Warm-up turns without a steady round (a
    drafter that drafted only after plain rounds) read those rounds, catch-up included: an upper
    bound of a step, where the turns' totals would charge the prompt's catch-up to a few steps
    and switch the drafter off for good. Turns without per-round times (a whole-turn
    generate()) fall back to their totals."""
    ns = steps = rounds = late_ns = late_steps = 0
    for t in turns:
        if any(t.round_steps):
            a, b, c, d = step_rounds(t.round_draft_ns, t.round_steps)
            ns, steps, late_ns, late_steps = ns + a, steps + b, late_ns + c, late_steps + d
        else:  # a lookup
            times = t.round_draft_ns[: len(t.round_steps)]
            ns, rounds = ns + sum(times), rounds + len(times)
    if steps:
        return ns / 1e9 / steps, 0.0
    if late_steps:
        return late_ns / 1e9 / late_steps, 0.0
    if rounds:
        return 0.0, ns / 1e9 / rounds
    draft = sum(t.times_ns.get("draft", 0) for t in turns) / 1e9
    total_steps = sum(t.draft_steps for t in turns)
    if total_steps:
        return draft / total_steps, 0.0
    return 0.0, draft / max(sum(max(t.target_forwards - 1, 0) for t in turns), 1)


class Gain:
    """Whether a learned drafter should draft at all this round (before its first step): the
    recent drafted rounds' realized tokens per modelled second over a plain step's, a running
    mean; below 1, rounds are plain until a probe is due (Probes), and a probe's gain replaces
    the mean (the rounds behind it are stale). Realized, not expected: a round's gain is read
    after its verify from the tokens it yielded (1 + accepted) over T(n) for the nodes it
    verified and the steps it drafted, so a drafter whose calibrated estimates run high still
    switches itself off when its rounds do not pay."""

    def __init__(self):
        self.gain, self.probes, self.probing = GAIN_START, Probes(), False
        self.pending = None  # (nodes verified, drafter steps, costs) of the round in flight

    def skip(self) -> bool:
        self.probing = self.gain < 1.0 and self.probes.due()
        if self.gain >= 1.0 or self.probing:
            self.probes.drafted(merit=not self.probing)
            return False
        self.probes.plain()
        return True

    def note(self, n: int, steps: int, costs: Costs) -> None:
        """A drafted round's plan: n nodes to verify after `steps` drafter steps."""
        self.pending = (n, steps, costs)

    def realized(self, accepted: int) -> None:
        """After the verify: the round's gain (1 + accepted)/T(n) ÷ 1/T(0) joins the mean."""
        if self.pending is None:
            return
        n, steps, costs = self.pending
        self.pending = None
        g = (1.0 + accepted) / costs.round(n, steps) * costs.round(0, 0)
        self.gain = g if self.probing else GAIN_MEAN * self.gain + (1 - GAIN_MEAN) * g


class TreeChooser(Policy):
    """k=auto for a scored draft (a tree, or a chain whose nodes carry probabilities): how many
    of the best nodes to verify, and (learned drafters) whether to draft one more depth.

    A node's raw reach r is its path's draft probability (EAGLE: the product of the head's
    probabilities; suffix: the index's frequency ratios). ŝ = min(λ_depth · r, ŝ_parent), with
    λ_depth = (rounds whose accepted path reached depth + w) / (Σ r of the verified nodes at that
    depth + w): the nodes of one depth are disjoint events, so Σ r estimates the chance the path
    gets there. Sorted best first (ties: creation order), any prefix is a tree."""

    def __init__(self, max_nodes: int, max_depth: int):
        self.max_nodes, self.max_depth = max_nodes, max_depth
        self.reset()

    def reset(self) -> None:
        self.reached = [0.0] * (self.max_depth + 1)
        self.predicted = [0.0] * (self.max_depth + 1)
        self.gains = Gain()

    def skip(self) -> bool:
        return self.gains.skip()

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
        """Nodes to verify from estimates sorted best first, the drafter's `steps` paid."""
        return best_prefix(est_sorted[: self.max_nodes], self.costs, steps)

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

    def learn(self, proposal, acc) -> None:
        self.gains.realized(acc.n_draft_accepted)
        if proposal.reach is None or not len(proposal.tokens):
            return
        depth = proposal.layout.depth
        fade(self.predicted)
        fade(self.reached)
        for i, r in enumerate(proposal.reach[: proposal.n_draft]):
            d = min(int(depth[i + 1]), self.max_depth)
            self.predicted[d] += r
        for d in range(1, min(acc.n_draft_accepted, self.max_depth) + 1):
            self.reached[d] += 1

    def summary(self) -> dict:
        return {
            "max_nodes": self.max_nodes,
            **self.cost_summary(),
            "lambda": [round(self.lam(d), 3) for d in range(1, self.max_depth + 1)],
            "gain": round(self.gains.gain, 3),
        }


class NodeRates(Policy):
    """k=auto for a fixed tree template (Medusa's, Token Recycling's): each round verifies the
    template's best n nodes, n maximising (1 + Σ ŝ)/T(n), a node's ŝ its measured share of
    the rounds that verified it in which the accepted path went through it (prior PRIOR^depth,
    never above its parent's), every node always ranked after its parent."""

    def __init__(self, parents: list[int], max_nodes: int, prior: float = PRIOR):
        self.parents = list(parents)
        self.depth = depths_of(self.parents)
        self.prior = [prior**d for d in self.depth]
        self.max_nodes = max_nodes
        self.reset()

    def reset(self) -> None:
        n = len(self.parents)
        self.verified, self.accepted = [0.0] * n, [0.0] * n
        self.gains = Gain()

    def skip(self) -> bool:
        return self.gains.skip()

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
        self.gains.note(n, steps, self.costs)
        return sorted(order[:n])

    def learn(self, proposal, acc) -> None:
        self.gains.realized(acc.n_draft_accepted)
        nodes = proposal.nodes  # the template ids of the verified nodes
        if nodes is None:
            return
        path = set(acc.seen[0]) if acc.seen else set()
        fade(self.verified)
        fade(self.accepted)
        for j, t in enumerate(nodes):
            self.verified[t] += 1
            if j in path:
                self.accepted[t] += 1

    def summary(self) -> dict:
        return {"max_nodes": self.max_nodes, "nodes": len(self.parents), **self.cost_summary()}


def subtree(parents: list[int], keep: list[int]) -> list[int]:
    """The parents of the kept nodes (ascending, prefix-closed) renumbered among themselves."""
    index = {j: i for i, j in enumerate(keep)}
    return [index[parents[j]] if parents[j] >= 0 else -1 for j in keep]
