"""`k=auto`: each round drafts the length (or tree size) that maximises expected tokens per second.

    costs   the cost model T(k), the Policy every size policy answers as, a round's Plan
    chain   a chain's length (Chooser) and its confidence stop (Walk)
    tree    a scored tree's nodes (TreeChooser), a template's (NodeRates), the drafting switch
    rates   acceptance by depth and bucket, a drafter's confidence calibration, the probes
    fixed   a fixed k behind the same interface (FixedChain, FixedTree)

A round that drafts k tokens and verifies them in one target forward costs

    T(k) = c(1) + r + ρ·(c(k + 1) − c(1) + s(k)·d)       (T(0) = c(1) + r: a plain step)

c: the run's cost curve (engines.probe, timed after warm-up; linear between the sizes it timed),
d: the drafter's cost per sequential step, s(k): its steps for k tokens (a draft model: k, a lookup:
0), r: the drafting work paid every round whatever k (a lookup, a head's catch-up). d and r are
measured on the run's warm-up turns' steady rounds (`draft_costs`), never assumed. The round emits

    E(k) = 1 + Σ_{i=1..k} Π_{j=1..i} α_j

tokens in expectation, α_j the conditional acceptance at depth j (x_j accepted given x_1..x_{j−1}
were), kept per context bucket (n-gram methods: the match length) from the run's own rounds,
shrunk towards the pooled rate and a prior while a bucket has few rounds, every count fading by
DECAY per round so the rates follow the text at hand. The round drafts
k* = argmax_{0 ≤ k ≤ max_k} E(k)/T(k); k* = 0 is a plain step. A chain drafter that reads its
confidence before each token (the draft model) stops early where a token cannot pay, after
paying the step that read it: its α_1 is measured on the tokens it let through, so it plans with
α_1 times the share of its paid first steps that drafted (Chooser.go_rate), and a text where the
confidence keeps stopping it stops paying the step. A run that stays at 0 for
`PROBE_EVERY` rounds drafts k* over k ≥ 1 once, so its rates keep being measured; each probe
that leaves speculation off doubles the wait before the next (up to PROBE_MAX), so a drafter that
does not pay on the text at hand costs ever less, and a round that drafts on its merits resets it.

Trees score nodes instead: a node's reach probability ŝ (its path's draft probability, times a
per-depth calibration λ_depth fitted from the accepted paths), and the round keeps the n best
(a prefix-closed choice) maximising (1 + Σ ŝ)/T(n). Learned drafters stop extending early when the
next step's expected gain (its reach times its calibrated confidence) cannot raise E/T, and a tree
drafter skips drafting (a plain round) while its recent rounds' realized gain (the tokens they
yielded per second the decode loop measured them taking) is below a plain round's, drafting
again after PROBE_EVERY such rounds (the same doubling wait), a probe's gain moving that mean
PROBE_PULL of the way; while it drafts, one round in REFERENCE_EVERY is plain, so that the plain
round it compares with is measured now. A trained drafter's rounds go no deeper than the chain
the rule picks with its held-out acceptance on the run's costs (rule_depth); each measured
drafted round refits ρ, the measured ÷ modelled cost of drafting, which scales every T(n) − T(0)
the sizes are chosen with (a verify's rows and a drafter's steps cost more in the loop than warm
probes time them). Every policy also reads each round's verify as the loop timed it
(Costs.observe): plain ones set a level that moves the whole curve (the host's speed drifts from
the curve, anchored once after warm-up), wider ones refit the scale of the curve's extra rows,
c(q) − c(1) (on a 2-core Xeon the loop's 2- to 8-row verifies cost 2–3× what the curve, timed on
back-to-back forwards, gives them), so sizes are priced as verified.

The choice for a round reads only earlier rounds and this round's draft, never the target's
verdict on it, so every accept rule stays lossless (tests/test_adaptive.py checks the law at T=1).
A turn met again (a measurement repeat) starts from the policy's state when it first started
(Policy.enter), and env.json keeps its measured inputs apart from its priors, limits, constants
and what it learned (Policy.summary).
"""

from methods.auto.chain import Chooser, Walk, best_chain, expected
from methods.auto.costs import AUTO, Costs, Plan, Policy, affordable
from methods.auto.fixed import Always, FixedChain, FixedTree
from methods.auto.rates import (
    PRIOR,
    PROBE_EVERY,
    PROBE_MAX,
    Confidence,
    Depths,
    Probes,
    depths_of,
    fade,
    trained_prior,
)
from methods.auto.tree import (
    REFERENCE_EVERY,
    Gain,
    NodeRates,
    TreeChooser,
    best_prefix,
    rule_depth,
    subtree,
)

__all__ = [
    "AUTO", "PRIOR", "PROBE_EVERY", "PROBE_MAX", "REFERENCE_EVERY", "Always", "Chooser",
    "Confidence", "Costs", "Depths", "FixedChain", "FixedTree", "Gain", "NodeRates", "Plan",
    "Policy", "Probes", "TreeChooser", "Walk", "affordable", "best_chain", "best_prefix",
    "depths_of", "expected", "fade", "rule_depth", "subtree", "trained_prior",
]  # fmt: skip
