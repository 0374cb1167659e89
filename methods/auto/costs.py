"""k=auto's cost model: T(k) = c(k + 1) + s(k)·d + r (methods/auto/__init__.py), and what every
policy shares: the run's costs, set by `calibrate`, and their summary."""

from __future__ import annotations

import bisect
import copy
from collections import OrderedDict
from dataclasses import dataclass

AUTO = "auto"  # the value of k that turns the policy on
VERIFY_MEAN = 0.9  # weight of the past in the loop's verify means (about ten rounds)
SCALE_MIN, SCALE_MAX = 0.5, 5.0  # the range the loop's measured verify scale is kept in
SNAPSHOTS = 256  # turns whose starting policy is remembered (their repeats restore it)
UNSAVED = ("forced", "snapshots")  # a run's switch and the store itself: not learned state


def affordable(curve: dict, ratio: float) -> int:
    """The largest n with curve[n] ≤ ratio · c(1) (at least the smallest size timed): a round
    may cost at most `ratio` times a plain step (methods.budget, a fixed tree's node budget)."""
    base = curve[min(curve)]
    ok = [n for n, c in curve.items() if c <= ratio * base]
    return max(ok) if ok else min(curve)


@dataclass
class Plan:
    """What a round's policy chose, handed back to it with the round's outcome (Policy.learn):
    the context its rates are kept for (n-gram methods: the match length), a chain drafter's
    confidence before each token it drafted, a scored tree's per-node reach, a template's node
    ids. A method fills what its policy reads; a fixed policy reads nothing."""

    bucket: object = None
    confs: list | None = None
    reach: list | None = None
    nodes: list | None = None


class Costs:
    """c(q) from a timed curve {q: seconds}, with the drafter's measured costs."""

    def __init__(
        self, curve: dict, step_s: float = 0.0, round_s: float = 0.0, overhead_s: float = 0.0
    ):
        self.q = sorted(curve)
        self.c = [float(curve[q]) for q in self.q]
        # batch=B (engines.probe.BatchCurve): rows priced on the round's shared forward
        self.batch = curve if callable(getattr(curve, "verify", None)) else None
        self.step_s, self.round_s = float(step_s), float(round_s)
        self.overhead_s = max(float(overhead_s), 0.0)
        # ρ: measured ÷ modelled cost of drafting (what a round costs beyond a plain one), fitted
        # from the run's rounds (Gain.realized): a verify's rows and a drafter's steps cost
        # more inside the decode loop than the warm probes time (measured ~2× on Zen 4: a
        # 4-row verify after drafting 1.2 ms over a plain step, the probe's curve 0.5 ms)
        self.extra = 1.0
        # the loop's own verifies: a plain one's mean seconds, and the measured ÷ modelled
        # cost of a wider one's extra rows (observe): the curve is timed on back-to-back
        # forwards of each size, the loop's verifies follow drafting and a plain run
        self.verify_scale, self.plain_verify = 1.0, None
        self._excess = self._modelled = 0.0  # faded sums over wider verifies (observe)
        self._at: dict[int, float] = {}  # verify(q) by q: the sizing asks ~170 times a round

    def verify(self, q: int) -> float:
        """Seconds of one target forward over q tokens, linear between timed sizes (and past
        the largest, along its last segment); at batch=B, on the shared forward as the other
        sequences have filled it so far (engines.probe.BatchCurve)."""
        if self.batch is not None:
            return self.batch.verify(q)
        c = self._at.get(q)
        if c is None:
            c = self._at[q] = self._interpolate(q)
        return c

    def _interpolate(self, q: int) -> float:
        xs, ys = self.q, self.c
        if len(xs) == 1:
            return ys[0] * q / xs[0]
        i = min(max(bisect.bisect_left(xs, q), 1), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return max(y0 + (y1 - y0) * (q - x0) / (x1 - x0), ys[0] * 0.5)

    def observe(self, q: int, seconds: float | None) -> None:
        """A verify the decode loop measured (q rows, its seconds; None: not measured): a
        plain one joins the plain mean; a wider one refits verify_scale, what the recent
        wider verifies' rows cost over that mean ÷ what the curve says they cost (a ratio of
        faded sums, so one noisy round moves it by its share, clipped to SCALE_MIN–SCALE_MAX).
        Every drafted round's verify counts, a probe's too (its drafter's catch-up is drafting,
        not verify)."""
        if seconds is None or self.batch is not None:
            return
        if q <= 1:
            self.plain_verify = running_mean(self.plain_verify, seconds)
            return
        if self.plain_verify is None:
            return
        model = (self.verify(q) - self.verify(1)) * self.level()
        if model <= 0:
            return
        self._excess = VERIFY_MEAN * self._excess + (seconds - self.plain_verify)
        self._modelled = VERIFY_MEAN * self._modelled + model
        self.verify_scale = min(max(self._excess / self._modelled, SCALE_MIN), SCALE_MAX)

    def drafting(self, tokens: int, steps: int) -> float:
        """The model's cost of drafting: a round's T beyond a plain one's, before ρ (its
        verify's extra rows as the loop measures them: verify_scale)."""
        rows = (self.verify(tokens + 1) - self.verify(1)) * self.level()
        return self.verify_scale * rows + steps * self.step_s

    def level(self) -> float:
        """How the host's step now compares with the curve's: the loop's mean plain verify ÷
        c(1) (1 until it has measured one). The curve is anchored to the baseline's step once, after
        warm-up, and the host drifts from it (a run on a 2-core Xeon: c(1) 8.2 ms there, the
        loop's plain verifies 7.1-7.7 ms for the whole run), which priced every round ~10% high
        and drafting's share of it low; the whole curve moves with the level, its extra rows
        refitted on top (verify_scale)."""
        return 1.0 if self.plain_verify is None else self.plain_verify / self.verify(1)

    def round(self, tokens: int, steps: int) -> float:
        """T: a round verifying `tokens` drafted tokens made in `steps` drafter steps."""
        plain = self.verify(1) * self.level() + self.round_s + self.overhead_s
        return plain + self.extra * self.drafting(tokens, steps)


def running_mean(old: float | None, new: float, past: float = VERIFY_MEAN) -> float:
    """Every k=auto running mean: `past` of the old value, the rest the new one; the new value
    alone where there is none yet."""
    return new if old is None else past * old + (1 - past) * new


class Policy:
    """What every draft-size policy answers, and what k=auto's share: the run's costs, set by
    `calibrate`, and their summary. A method always holds one (methods.base.Method.policy):
    k=auto's (chain.Chooser, tree.TreeChooser, tree.NodeRates) or a fixed k's (fixed.py)."""

    costs: Costs | None = None
    # every round drafts (a learned drafter's plain-round switch is off): set while the run
    # measures the drafter's cost per step, so that each round after the first is a steady one
    forced = False

    def calibrate(self, curve: dict, step_s=0.0, round_s=0.0, overhead_s=0.0) -> bool:
        """The run's warm curve and drafting costs (bench.run.runner, after warm-up): the rates
        start again from the prior for the measured turns. → True when a fixed size changed."""
        self.costs = Costs(curve, step_s, round_s, overhead_s)
        self.snapshots = OrderedDict()  # states remembered on other costs describe no turn now
        self.reset()
        return False

    def reset(self) -> None:
        """Forget what the rounds taught (the rates, the drafting switch)."""

    def priced(self, measure, curve: dict) -> tuple[dict, tuple]:
        """What the run calibrates this policy with: (the cost curve, the drafter's seconds per
        step and per round and the loop's overhead), read by `measure()` (an untimed pass of
        both sides after warm-up, bench.run.runner); a fixed policy needs none of it."""
        return measure()

    def ready(self, provisional, key: tuple | None = None) -> None:
        """Before a turn (untimed): a policy no run has calibrated (a method driven without the
        runner's warm-up: tests, tools) plans with `provisional()`, the engine's curve or a
        quick one; a turn seen before starts from the state it first started from (enter)."""
        if self.costs is None:
            self.calibrate(provisional())
        if key is not None:
            self.enter(key)

    def round_done(self, proposal, acc, seconds=None, verify_s=None) -> None:
        """After a round's verify (timed as draft): the loop's measured verify refits the
        costs (Costs.observe), then the policy learns from the round (learn)."""
        if self.costs is not None:
            self.costs.observe(1 + len(proposal.tokens), verify_s)
        self.learn(proposal, acc, seconds)

    def learn(self, proposal, acc, seconds: float | None = None) -> None:
        """The round's outcome (methods.base.Accepted) against its plan (proposal.plan)."""

    # --- a repeat starts where its first measurement started (as suffix's and recycling's
    # cross-turn state does): without it repeat 1 of a prompt started with the rates, the
    # on/off switch and the refits repeat 0 had learned on that very text ---
    def _shared(self) -> dict:
        """deepcopy's memo for what a state shares and never copies: batch=B's curve, which
        reads the other sequences' seats (engines.probe.BatchCurve)."""
        batch = getattr(self.costs, "batch", None)
        return {} if batch is None else {id(batch): batch}

    def state(self) -> dict:
        """A copy of everything the policy learns from rounds (rates, the drafting switch and
        its probes, the costs' refits), to hand to `restore`."""
        mine = {k: v for k, v in vars(self).items() if k not in UNSAVED}
        return copy.deepcopy(mine, self._shared())

    def restore(self, saved: dict) -> None:
        """Back to a `state()` (copied again: the saved one stays as it was)."""
        vars(self).update(copy.deepcopy(saved, self._shared()))

    def enter(self, key: tuple) -> None:
        """A turn whose prompt is `key` starts (untimed, methods.base.Method.ready): restore
        the state its first measurement started from, or remember this one (the SNAPSHOTS
        most recent turns; `calibrate` forgets them all)."""
        snaps = vars(self).setdefault("snapshots", OrderedDict())
        if key in snaps:
            snaps.move_to_end(key)
            self.restore(snaps[key])
            return
        snaps[key] = self.state()
        while len(snaps) > SNAPSHOTS:
            snaps.popitem(last=False)

    def summary(self) -> dict:
        """env.json's `method_info.policy` (and `policy_end`, as the measured turns left it), kept
        apart by where each number comes from: `measured` (what the run timed: the curve's c(1)
        as anchored after warm-up, the drafter's seconds per step and per round, the loop's
        overhead), `limits` (the largest draft a round may choose), `priors` (where each
        learned quantity starts before the run's rounds: assumed or from training, never
        measured here), `learned` (those quantities now, from the rounds: at `auto`, after
        calibration, still the priors) and `constants` (the rule's fixed numbers)."""
        c = self.costs
        ms = (lambda v: None) if c is None else (lambda v: round(v * 1e3, 3))  # noqa: E731
        measured = {
            "c1_ms": ms(c.verify(1)) if c else None,
            "step_ms": ms(c.step_s) if c else None,
            "round_ms": ms(c.round_s) if c else None,
            "overhead_ms": ms(c.overhead_s) if c else None,
        }
        learned = {
            "rho": None if c is None else round(c.extra, 3),  # measured ÷ modelled drafting
            "verify_scale": None if c is None else round(c.verify_scale, 3),
            "level": None if c is None else round(c.level(), 3),  # loop's plain verify ÷ c(1)
        }
        return {
            "kind": type(self).__name__,
            "measured": measured,
            "limits": self.limits(),
            "priors": {"rho": 1.0, "verify_scale": 1.0, "level": 1.0, **self.priors()},
            "learned": {**learned, **self.learned()},
            "constants": {
                "VERIFY_MEAN": VERIFY_MEAN,
                "SCALE_MIN": SCALE_MIN,
                "SCALE_MAX": SCALE_MAX,
                **self.constants(),
            },
        }

    # each policy's own parts of its summary
    def limits(self) -> dict:
        return {}

    def priors(self) -> dict:
        return {}

    def learned(self) -> dict:
        return {}

    def constants(self) -> dict:
        return {}
