"""How many tree nodes to verify per round, from the engine's timed cost curve.

A verify forward over n new tokens costs c(n) (engines.probe: median of timed forwards after a
128-token prefill, one clock). On a 2-core CPU c grows steeply with n; on a GPU it is flat up to
dozens of tokens. The automatic budget picks the largest n with c(n) ≤ ratio · c(1): a round may
cost at most `ratio` times a plain decoding step. The curve and the choice are reported with
the run. A k=auto policy is calibrated once, by the run after its warm-up (Method.calibrate), or
before a turn where no run did (Method.ready: `provisional`); constructors do not time the
engine, except a fixed-k EAGLE's `total_tokens: auto` (auto_tokens), still sized at build.
"""

from __future__ import annotations

from engines.probe import step_costs, timed
from methods.auto.costs import affordable

QUICK = (1, 2, 4, 8, 16, 32)  # a provisional curve's sizes: one repeat each, about a second
MAX_NODES = 63  # k=auto's largest tree: a verify forward of 64 tokens, the largest the run times


choose = affordable  # the largest n with costs[n] ≤ ratio · costs[1] (at least 1)


def auto_tokens(engine, ratio: float) -> tuple[int, dict]:
    """A provisional (tokens per verify forward, curve) for a method being built: the curve the
    engine already has, else a quick one (one repeat over QUICK). The run replaces it with its
    curve timed after warm-up (Method.calibrate), so the full curve is timed once per engine."""
    costs = provisional(engine)
    return choose(costs, ratio), costs


def provisional(engine) -> dict:
    """The curve the engine already has, else a quick one: what a policy no run has calibrated
    plans with (Method.ready), and a fixed-k EAGLE's total_tokens=auto until Method.calibrate."""
    return timed(engine) or step_costs(engine, sizes=QUICK, repeats=1)
