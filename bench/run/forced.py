"""`alpha1_forced`: a learned drafter's first-token acceptance with every round drafting one
token, from an untimed pass over the first turn of each of a cell's prompts.

k=auto drafts where it expects drafting to pay, so `acceptance_rate` reads a drafter on the
rounds it chose (EAGLE-2 0.42 in a `make bench` that way, 0.35-0.38 with every round
drafting): a figure of the drafter and the selection together. This pass reads the drafter
alone: every round drafts exactly one token, its first (the drafter's top token; at T > 0 a
draft model's sample), and the target accepts it or not.

Which knobs make a method draft one token every round is data, in its YAML: `alpha1_forced`
(draft: k 1; eagle, eagle3: k 1, top_k 1, total_tokens 1; medusa: k 1, tree chain), the
settings docs/training.md's "α, first token" figures were measured with. A method without the
block has no learned drafter and no pass; `method.alpha1_forced=null` turns it off.

The pass decodes with a second instance of the method, built from the cell's own method node
(its weights, draft vocabulary, drafter_weights) with those knobs over it, through the run's
own conversation code (the run's sampling, the turn's seed), after the prompt's timed repeats:
the timed method's state (its k=auto policy, its caches) is never touched, and nothing of the
pass is inside a measured turn's clock.
"""

from __future__ import annotations

import dataclasses

from omegaconf import OmegaConf

from bench.outputs.records import ALPHA1
from methods.registry import build_method

KNOB = "alpha1_forced"  # the method's YAML block: the knobs that draft one token every round


def build(method_cfg, ctx):
    """The method drafting exactly one token every round (its YAML's `alpha1_forced` knobs over
    the cell's node), or None for a method without a learned drafter. The top-level `k` is the
    timed cell's: the forced one takes its own."""
    over = method_cfg.get(KNOB)
    if over is None:
        return None
    node = OmegaConf.merge(method_cfg, over)
    node[KNOB] = None  # the forced instance measures nothing itself
    return build_method(node, dataclasses.replace(ctx, k_override=None))


def first_tokens(runner, method, prompt) -> dict:
    """One untimed conversation of `prompt`'s first turn with `method` (the forced instance) →
    {alpha1_drafted: rounds that drafted a first token, alpha1_accepted: rounds whose first
    token the target accepted}."""
    first = dataclasses.replace(prompt, turns=prompt.turns[:1])
    ((_, res, _, _),) = runner.conversation(method, first, runner.max_new(prompt))
    if getattr(runner.target, "compiled", False):  # shapes compiled here, outside any clock
        runner.graphs = runner.target.graphs()
    drafted, accepted = res.drafted_per_pos[:1] or [0], res.accepted_per_pos[:1] or [0]
    return dict(zip(ALPHA1, (drafted[0], accepted[0])))
