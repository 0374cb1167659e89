"""What a method is: one speculative round (draft → verify → accept) on an explicit state.

The decode loop (`bench.decode.loop`) calls, per turn, `start` and `prefill` once, then
`draft`, `verify`, `accept` per round, timing each call as its phase. A method never times itself
and never decides when generation stops; after the last round it calls `finish` (untimed), where
a method may update state it keeps across turns. The defaults here implement chain speculation
against the target; a drafter overrides `draft` (and `prefill`/`accept` if it keeps state).
A tree method subclasses `TreeMethod`: its `draft` returns a `TreeProposal`, and the one shared
verify (methods.treeverify) and accept (groundfloor.tree.accept) do the rest; `after_accept` lets it
read the verify forward (hidden states, logits) for its drafter. Sampling rules and their
proofs: docs/sampling.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

import torch
from omegaconf import OmegaConf

from groundfloor.sampling import accept_chain, accept_greedy, probs
from groundfloor.state import DecodeState
from groundfloor.tree import Tree, TreeLayout
from groundfloor.tree import accept as accept_tree
from methods import budget, knobs, sizing
from methods.auto import FixedChain, Plan
from methods.treeverify import keep_path, verify_tree


@dataclass
class Proposal:
    """Drafted continuation of the committed tokens: a chain x_1..x_m (m may be 0)."""

    tokens: torch.Tensor  # (m,) long
    q: torch.Tensor | None = None  # (m, V) draft probabilities at T > 0; None: point masses
    steps: int = 0  # sequential drafter forwards that made it (0: a lookup, no learned drafter)
    # what the round's draft-size policy chose, handed back to it after the verify (its learn)
    plan: Plan = field(default_factory=Plan)


@dataclass
class TreeProposal(Proposal):
    """Drafted tree: tokens[i] is node i of `layout` (groundfloor.tree's numbering). Only the first
    `n_draft` nodes (default: all) are a draft; later ones ride along in the verify forward
    without ever being accepted (lookahead's Jacobi window)."""

    layout: TreeLayout | None = None
    n_draft: int | None = None

    def __post_init__(self):
        if self.n_draft is None:
            self.n_draft = self.layout.size


@dataclass
class Accepted:
    tokens: list[int]  # accepted draft tokens followed by the target's own token (≥ 1 token)
    n_draft_accepted: int  # how many of `tokens` came from the draft
    drafted: int  # draft tokens verified this round (tree: all nodes)
    depth: int  # longest drafted path (chain: m)
    width: int | None = None  # tokens verified after the root, when more than `drafted`
    seen: tuple | None = None  # what observe() hands the drafter (a tree's path, logits, hidden)


class Method:
    """Base class; subclasses set `name` and override the phases they change."""

    name = "base"
    baseline = "ar"  # the method the run interleaves as its baseline (conf/method/<baseline>)
    lossless = True  # False: an accept rule that may change the output (Medusa's typical)
    bound = False  # True: a bound to compare against, not a method to deploy (oracle)
    # k=auto reads each round's measured seconds; a sequence decoded among others (batch=B)
    # does not: its rounds' time is the batch's, and it plans on its share of the curve
    round_seconds = True

    def __init__(self, cfg, ctx):
        """cfg: this method's config node; ctx: methods.registry.Context (target engine, tokenizer,
        device…)."""
        self.cfg = cfg
        self.ctx = ctx
        self.target = ctx.target  # an engines.base.Engine
        # the draft-size policy (methods.sizing): k=auto's, or a fixed k's with the same
        # interface; a method that drafts sets its own, one that does not drafts nothing
        self.policy = FixedChain(0)
        self.info: dict = {}
        if cfg is not None and "max_k" in cfg:
            sizing.max_k(self)
        one = cfg.get("alpha1_forced") if cfg is not None else None
        knobs.need(
            self,
            one is None or (isinstance(one, Mapping) and all(k in cfg for k in one)),
            "alpha1_forced",
            OmegaConf.to_container(one) if OmegaConf.is_config(one) else one,
            "use null or a mapping of this method's own knobs (those that draft one token "
            "every round: bench.run.forced)",
        )
        fixed = cfg.get("fixed_k") if cfg is not None else None
        knobs.need(
            self,
            fixed is None or (isinstance(fixed, int) and fixed >= 1),
            "fixed_k",
            fixed,
            "use an integer >= 1 (what a fixed-length peer drafts when k=auto)",
        )

    def force_drafting(self, on: bool) -> None:
        """Every round drafts while `on` (the run's measure of the drafter's cost per step reads
        steady rounds: each after a drafted one, no catch-up in it; a fixed k always does)."""
        self.policy.forced = on

    def max_verify_width(self) -> int:
        """The most tokens one verify forward may append to the cache (sizes the cache)."""
        return self.policy.max_k + 1

    # --- memory: extra weights and buffers this method holds beyond the target ---
    def static_bytes(self) -> int:
        """Memory the method holds before a turn starts (drafter weights, a corpus index, state
        kept across requests): outside a turn's peak-memory delta, so added to it."""
        return 0

    def state_bytes(self, state: DecodeState) -> int:
        """Memory of the turn's own drafter state (a draft KV cache, a head cache, a per-turn
        index): allocated inside the turn, so already in its peak delta; reported, not added."""
        return 0

    def calibrate(self, costs: dict, drafting: tuple = (0.0, 0.0, 0.0)) -> bool:
        """The run's cost curve, timed after warm-up ({q: seconds}), and what the warm-up turns
        measured: the drafter's (seconds per step, seconds per round) and the loop's overhead
        per round beyond c(1), for the policy (Policy.calibrate; its rates start again from
        the prior for the measured turns), whose summary joins the method's info (env.json);
        → True when a fixed size changed."""
        changed = self.policy.calibrate(costs, *drafting)
        self.info["policy"] = self.policy.summary()
        return changed

    def ready(self, key: tuple | None = None) -> None:
        """Before a turn (untimed): the policy readies itself (Policy.ready: one no run has
        calibrated plans with the engine's curve or a quick one; constructors never time the
        engine). `key` (the turn's prompt ids): a turn seen before starts from the policy's
        state when it was first seen, so each repeat of a prompt starts where repeat 0
        started, not tuned by it to its own text."""
        self.policy.ready(partial(budget.provisional, self.target), key)

    def learn(
        self,
        proposal: Proposal,
        acc: Accepted,
        seconds: float | None = None,
        verify_s: float | None = None,
    ) -> None:
        """The policy reads the round's outcome (after the verify; timed as draft), what the
        round took (its draft, verify and accept spans) and its verify alone (the cost model's
        verify_scale: methods.auto.Costs.observe); None where not measured."""
        timed = self.round_seconds
        self.policy.round_done(
            proposal, acc, seconds if timed else None, verify_s if timed else None
        )

    # --- per turn ---
    def start(self, state: DecodeState) -> None:
        """Reset method-private state in `state.aux` for a new turn."""

    def prefill(self, state: DecodeState) -> torch.Tensor:
        """Target forward over the prompt; returns the (V,) logits for the first new token."""
        out = self.target.forward(state.tokens[None], state.cache, logits_to_keep=1)
        return out.logits[0, -1]

    def draft_prefill(self, state: DecodeState, logits: torch.Tensor) -> None:
        """The drafter's own prefill (a draft model's forward, an index over the prompt), after
        the target's; timed as draft."""

    def observe(self, state: DecodeState, proposal: Proposal, acc: Accepted) -> None:
        """The drafter reads the round's verify and accept (before the accepted tokens are
        appended): its cache rollback, its features; timed as draft."""

    def finish(self, state: DecodeState) -> None:
        """The turn is over: `state.ids[state.n_prompt : state.length]` is its output."""

    # --- per round ---
    def draft(self, state: DecodeState) -> Proposal:
        return Proposal(tokens=state.ids.new_empty(0))

    def verify(self, state: DecodeState, proposal: Proposal) -> torch.Tensor:
        """One target forward over [last, x_1..x_m] → logits (m+1, V)."""
        inp = torch.cat([state.last, proposal.tokens])[None]
        return self.target.forward(inp, state.cache).logits[0]

    def accept(self, state: DecodeState, proposal: Proposal, logits: torch.Tensor) -> Accepted:
        """Accept a prefix of the chain, crop the target cache to the accepted path."""
        m = proposal.tokens.numel()
        if state.sampling.greedy:
            n, nxt = accept_greedy(logits, proposal.tokens)
        else:
            n, nxt = accept_chain(
                probs(logits, state.sampling), proposal.tokens, proposal.q, state.generator
            )
        # cache now holds ids[:length-1] + last + x_1..x_m; keep last + x_1..x_n
        state.cache.crop(state.length + n)
        return Accepted(
            tokens=proposal.tokens[:n].tolist() + [nxt], n_draft_accepted=n, drafted=m, depth=m
        )


class TreeMethod(Method):
    """A method whose draft is a token tree (a chain is a one-branch tree): one verify forward
    with the tree mask, the tree rule, and the cache kept to the accepted path."""

    hidden_layers: tuple = ()  # target hidden states the drafter reads from each verify
    _plain: TreeProposal | None = None  # plain_proposal's, built on first use

    def plain_proposal(self, state: DecodeState) -> TreeProposal:
        """A plain round's empty proposal (no node, no drafter step), built once per device and
        handed back every such round: a round k=auto leaves plain, most rounds where drafting
        does not pay, spends as little on drafting as it can."""
        if self._plain is None or self._plain.tokens.device != state.ids.device:
            self._plain = TreeProposal(
                tokens=state.ids.new_empty(0),
                layout=TreeLayout.from_parents([]),
                plan=Plan(reach=[], nodes=[]),
            )
        return self._plain

    def draft_vocab(self):
        """method.draft_vocab, checked: how many of the most frequent tokens the drafter scores
        (an integer >= 1), or None for the full vocabulary."""
        n = self.cfg.get("draft_vocab")
        knobs.need(
            self,
            n is None or int(n) >= 1,
            "draft_vocab",
            n,
            "use an integer >= 1 or null (the full vocabulary)",
        )
        return n

    def verify(self, state: DecodeState, proposal: TreeProposal):
        """→ (logits (N+1, V): row 0 the root, row i + 1 node i; hidden states asked for)."""
        out = verify_tree(
            self.target,
            state.last,
            proposal.tokens,
            proposal.layout,
            state.cache,
            hidden=self.hidden_layers,
        )
        return out.logits[0], out.hidden

    def accept_path(self, state: DecodeState, tree: Tree, logits: torch.Tensor):
        """(accepted nodes from the root down, the token after them); the lossless tree rule."""
        return accept_tree(logits, tree, state.sampling, state.generator)

    def after_accept(
        self,
        state: DecodeState,
        proposal: TreeProposal,
        nodes: list[int],
        logits: torch.Tensor,
        hidden: dict,
    ) -> None:
        """Read the verify forward for the drafter (before the accepted tokens are appended)."""

    def accept(self, state: DecodeState, proposal: TreeProposal, verified) -> Accepted:
        logits, hidden = verified
        n = proposal.n_draft
        tree = Tree(parents=proposal.layout.parents[:n], tokens=proposal.tokens[:n])
        nodes, nxt = self.accept_path(state, tree, logits[: n + 1])
        # cache: ids[:length-1] + root + every node; keep root + the accepted nodes
        keep_path(state.cache, state.length - 1, nodes)
        depth = int(proposal.layout.depth[1 : n + 1].max()) if n else 0
        return Accepted(
            tokens=[int(proposal.tokens[j]) for j in nodes] + [nxt],
            n_draft_accepted=len(nodes),
            drafted=n,
            depth=depth,
            width=proposal.layout.size if proposal.layout.size != n else None,
            seen=(nodes, logits, hidden),
        )

    def observe(self, state: DecodeState, proposal: TreeProposal, acc: Accepted) -> None:
        self.after_accept(state, proposal, *acc.seen)
