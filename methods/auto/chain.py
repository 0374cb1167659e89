"""k=auto for a chain: E(k) = 1 + Σ Π α_j tokens for T(k) seconds, k* = argmax E(k)/T(k)."""

from __future__ import annotations

from methods.auto.costs import Costs, Plan, Policy
from methods.auto.rates import (
    BINS,
    DECAY,
    PRIOR_WEIGHT,
    PROBE_EVERY,
    PROBE_MAX,
    Confidence,
    Depths,
    Probes,
)


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


class Chooser(Policy):
    """One method's k=auto state: its costs, rates and the lengths it chose.

    ch = Chooser(max_k=8, steps_per_token=0)       # a lookup method
    ch.calibrate(curve, step_s, round_s)           # the run's warm curve and drafter cost
    k = ch.length(bucket)                          # before drafting
    walk = ch.walk()                               # a drafter that reads its confidence:
    walk.go(lambda: conf)                          #   before each token (False: stop here)
    ch.learn(proposal, acc)                        # after the verify (proposal.plan: walk.plan())
    """

    def __init__(self, max_k: int, steps_per_token: int, prior: list[float] | float = 0.5):
        self.max_k, self.steps_per_token = max_k, steps_per_token
        self.prior = prior
        self.reset()

    def reset(self) -> None:
        """Forget the rates (after warm-up: the measured turns start from the prior)."""
        self.depths = Depths(self.max_k, self.prior)
        self.conf = Confidence()
        self.probes, self.probing = Probes(), False
        # rounds whose first drafter step was paid on merit, and those of them whose
        # confidence then let a token through (counts fading by DECAY a paid step: go_rate)
        self.stepped, self.went = 0.0, 0.0

    def go_rate(self) -> float:
        """P(the first token is drafted | its drafter step was paid): the confidence stop
        (keep_going) turns many paid steps into no token. The depth rates are measured on the
        tokens drafted, the rounds the confidence let through, so a round that pays the step
        yields α₁ times this many first tokens, not α₁: on make bench's translation prompts
        (2-core Xeon) the draft model paid a step in every round (0.62-0.74 ms a round, a tenth
        of a target step) and drafted in 0-13% of them: 0.87x with 95% of its rounds plain.
        Prior 1 (a new run's steps go)."""
        return (self.went + PRIOR_WEIGHT) / (self.stepped + PRIOR_WEIGHT)

    def length(self, bucket=None, cap: int | None = None) -> int:
        """The draft length for this round (0: draft nothing); `cap`: tokens available."""
        top = self.max_k if cap is None else min(cap, self.max_k)
        self.probing = False
        if top <= 0:
            return 0
        a = self.depths.alphas(bucket)
        s = self.steps_per_token
        if s:  # a round that pays the first step drafts its token go_rate() of the time
            a = [a[0] * self.go_rate(), *a[1:]]
        k = best_chain(a, self.costs, top, s)
        # measure again: the best k ≥ 1; forced (force_drafting: the run's reading of the
        # drafter's cost, check=distribution) drafts every round the same way
        if k == 0 and (self.forced or self.probes.due()):
            rates = [expected(a, j) / self.costs.round(j, j * s) for j in range(1, top + 1)]
            k, self.probing = 1 + rates.index(max(rates)), True
        return k

    def keep_going(self, e: float, reach: float, drafted: int, conf: float) -> bool:
        """Early stop: does drafting token `drafted + 1`, whose drafter top probability is
        `conf` (read before the token is drawn), raise E/T? e: the expected tokens of the
        `drafted` so far, reach: their joint acceptance estimate. The drafter step that read
        `conf` is paid either way: what the token still costs is its verify row. A probing
        round drafts its first token whatever the confidence."""
        if self.probing and drafted == 0:
            return True
        c, paid = self.costs, (drafted + 1) * self.steps_per_token
        now = e / c.round(drafted, paid)
        nxt = (e + reach * self.rate(conf, drafted)) / c.round(drafted + 1, paid)
        return nxt > now

    def rate(self, conf: float, drafted: int) -> float:
        """Acceptance of the next token: its confidence bin's measured rate, shrunk towards
        the running rate at its depth."""
        return self.conf.rate(conf, self.depths.alphas()[min(drafted, self.max_k - 1)])

    def walk(self, bucket=None) -> "Walk":
        """A chain drafter's early stop for this round (keep_going), token by token."""
        return Walk(self, bucket)

    def learn(self, proposal, acc, seconds: float | None = None) -> None:
        if self.steps_per_token and proposal.steps and not self.probing:
            self.stepped = self.stepped * DECAY + 1
            self.went = self.went * DECAY + (1 if acc.drafted else 0)
        plan = proposal.plan
        self.record(plan.bucket, acc.drafted, acc.n_draft_accepted, plan.confs)

    def record(self, bucket, drafted: int, accepted: int, confs: list[float] | None = None):
        if not drafted:
            self.probes.plain()
            return
        self.probes.drafted(merit=not self.probing)
        self.depths.record(bucket, drafted, accepted)
        if confs:
            self.conf.record(confs, accepted)

    def limits(self) -> dict:
        return {"max_k": self.max_k, "steps_per_token": self.steps_per_token}

    def priors(self) -> dict:
        """α_j before any round (a trained drafter's held-out top-1, else PRIOR), and go_rate's
        (every paid step drafts)."""
        return {"alpha": [round(a, 3) for a in self.depths.prior], "go_rate": 1.0}

    def learned(self) -> dict:
        return {
            "alpha": [round(a, 3) for a in self.depths.alphas()],
            "go_rate": round(self.go_rate(), 3),
        }

    def constants(self) -> dict:
        return {"PRIOR_WEIGHT": PRIOR_WEIGHT, "DECAY": DECAY, "PROBE_EVERY": PROBE_EVERY,
                "PROBE_MAX": PROBE_MAX, "BINS": BINS}  # fmt: skip


class Walk:
    """One round of a chain drafter that reads its confidence before each token (the draft
    model): `go(conf_of)` reads it (conf_of(): the drafter's top probability, computed only
    where a policy reads it) and says whether the token still pays (Chooser.keep_going); the
    expected tokens and reach so far, and the confidences of the tokens let through, are kept
    here and handed back as the round's plan."""

    def __init__(self, chooser: Chooser, bucket=None):
        self.ch, self.bucket = chooser, bucket
        self.e = self.reach = 1.0
        self.confs: list[float] = []

    def go(self, conf_of) -> bool:
        conf, drafted = conf_of(), len(self.confs)
        if not self.ch.keep_going(self.e, self.reach, drafted, conf):
            return False
        self.reach *= self.ch.rate(conf, drafted)
        self.e += self.reach
        self.confs.append(conf)
        return True

    def plan(self) -> Plan:
        return Plan(bucket=self.bucket, confs=self.confs)
