"""`suffix`: suffix decoding — draft by frequency from a suffix index of this turn and of earlier
outputs (Oliaro, Jia, Campos, Qiao, "SuffixDecoding: Extreme Speculative Decoding for Emerging
AI Applications", NeurIPS 2025, arXiv:2411.04975; Snowflake's Arctic Inference, in vLLM/SGLang).

Two indices (drafters.suffix_automaton, substring counts up to `max_depth` tokens):
- local: this turn's prompt + output, built in prefill, extended as tokens are committed;
- global: the outputs of earlier turns of the run, the cross-request cache. It lives on the method
  object, so it persists from prompt to prompt (and through warm-up and check=distribution); at
  most `max_cached` outputs, the oldest evicted first. A turn's output joins it when the turn
  ends (`finish`); the index work that implies (an append, or a rebuild after an eviction) runs
  in the next turn's draft_prefill, inside the clock as drafting (ResponseCache.sync). With
  `reuse_same_prompt: false` a turn never drafts from the output of an identical earlier
  prompt (Arctic's "a request id already cached is evicted at its start"): measurement
  repeats of one prompt then measure the same thing. `true` lets them hit, as a server would
  serve a repeated request.

Per round, for each match length m = 1 .. min(max_depth, L) − 1 whose context suffix
s = T[L−m..L−1] occurs in an index, a draft grows below s:

    edge s·u → s·u·x  has probability  count(s·u·x) / count(s·u); a node's probability is the
    product along its path (the empirical chance the continuation follows); nodes below
    min_token_prob are never drafted;
    chain: the most frequent child, repeatedly; tree: best-first over all nodes by probability;
    at most min(k, ⌊max_spec_factor · m + max_spec_offset⌋) nodes, at most max_depth − m deep.

A draft's score is the sum of its node probabilities (its expected accepted length); the best
score over m and over both indices is drafted (ties: the longer match, then the local index).
Drafts are point masses fixed before the target runs, verified as a chain or a tree with the
shared tree rule (groundfloor.tree), so the method is lossless at any temperature.

arctic-inference (PyPI) ships this as a C++ extension, but only as an sdist whose build needs a
C++20 compiler, CMake, nanobind, grpcio-tools, a pinned protobuf and its own torch in the build
environment (7 minutes on 2 cores with a local torch wheel; a multi-GB CUDA torch otherwise),
so specsweep carries its own index, tested against a brute-force counter
(tests/test_suffix_index.py).
With k=auto (methods.auto) a round verifies the n most probable nodes of the best draft
(at most max_k), their probabilities calibrated by depth on the run's accepted paths, n
maximising expected tokens per second on the run's cost curve; none when no size pays.
Knobs: k (or auto), max_k, shape (chain | tree), max_depth, max_spec_factor, max_spec_offset,
min_token_prob, max_cached, reuse_same_prompt.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from drafters.suffix_automaton import SuffixAutomaton
from groundfloor.errors import UserError
from groundfloor.tree import TreeLayout
from methods import auto, knobs, sizing
from methods.auto import Plan
from methods.base import TreeMethod, TreeProposal

SHAPES = ("chain", "tree")

SNAPSHOTS = 256  # turns whose starting cache is remembered (repeats restore it)


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # groundfloor.tree: −1 = child of the root
    score: float = 0.0  # Σ node probabilities
    probs: list[float] = field(default_factory=list)  # each node's probability
    match_len: int = 0


def grow(
    index: SuffixAutomaton, v: int, budget: int, depth: int, min_prob: float, tree: bool, kids: dict
) -> Draft:
    """Best-first draft below state v: ≤ budget nodes, ≤ depth deep, probability ≥ min_prob.
    `kids` memoises index.children per state within one round."""
    out = Draft()
    if budget <= 0 or depth <= 0:
        return out
    heap, tick = [], 0

    def push(u: int, prob: float, parent: int, level: int) -> None:
        nonlocal tick
        if level >= depth:
            return
        if u not in kids:
            kids[u] = index.children(u)
        for x, c in kids[u]:
            p = prob * index.count[c] / index.count[u]
            if p < min_prob:
                break  # children come most frequent first
            heapq.heappush(heap, (-p, tick, x, c, parent, level + 1))
            tick += 1
            if not tree:
                break  # a chain follows the most frequent child only

    push(v, 1.0, -1, 0)
    while heap and len(out.tokens) < budget:
        neg, _, x, c, parent, level = heapq.heappop(heap)
        out.tokens.append(x)
        out.parents.append(parent)
        out.probs.append(-neg)
        out.score -= neg
        push(c, -neg, len(out.tokens) - 1, level)
    return out


def speculate(
    index: SuffixAutomaton,
    v: int,
    n: int,
    longest: int,
    k: int,
    factor: float,
    offset: float,
    min_prob: float,
    max_depth: int,
    tree: bool,
) -> Draft:
    """The best-scoring draft over match lengths m ≤ min(n, longest); (v, n): the state and
    length of the longest context suffix found in `index`. Longest matches first; a shorter one
    is tried only if its budget could beat the best score (a draft scores at most its size)."""
    best, kids = Draft(), {}
    for m, u in reversed(index.suffix_states(v, n, longest)):
        budget = min(k, int(m * factor + offset + 1e-6))
        if budget <= best.score:
            continue
        d = grow(index, u, budget, max_depth - m, min_prob, tree, kids)
        if d.score > best.score:
            best, best.match_len = d, m
    return best


class ResponseCache:
    """Outputs of earlier turns, keyed by their prompt: at most `limit`, oldest evicted first,
    indexed by one automaton (rebuilt after an eviction: automata do not delete).

    A benchmark repeats each conversation: a turn seen before starts from the cache as it was
    when that turn first started (`enter`), as Token Recycling's matrix does, so a repeat never
    drafts from answers its own conversation gave later (turn 2's answer on turn 1's repeat).

    Between turns (`enter`, `add`, `drop`: the loop's untimed start and finish) only the
    bookkeeping of which outputs are cached changes; the index work they imply, a new output
    appended or, after an eviction or a restore, the whole index rebuilt (past `limit` outputs:
    every turn, O(Σ cached tokens · depth) in Python), waits for `sync`, which the next turn's
    draft_prefill runs inside the clock as drafting. The index a round drafts from is the one
    the cache's outputs give, as if it had been updated at once."""

    def __init__(self, limit: int, depth: int):
        self.limit, self.depth = limit, depth
        self.outputs: OrderedDict[tuple, list[int]] = OrderedDict()
        self.index = SuffixAutomaton(count_depth=depth)
        self.snapshots: OrderedDict[tuple, OrderedDict] = OrderedDict()
        self.pending: list[list[int]] = []  # outputs to append to the index at the next sync
        self.stale = False  # the index must be rebuilt from `outputs` at the next sync

    def enter(self, key: tuple) -> None:
        """A turn with prompt `key` starts: restore the cache it first started from, or
        remember this one."""
        if key in self.snapshots:
            self.snapshots.move_to_end(key)
            if list(self.outputs.items()) != list(self.snapshots[key].items()):
                self.outputs = OrderedDict(self.snapshots[key])
                self.stale = True
            return
        self.snapshots[key] = OrderedDict(self.outputs)  # the token lists are never mutated
        while len(self.snapshots) > SNAPSHOTS:
            self.snapshots.popitem(last=False)

    def sync(self) -> None:
        """Bring the index up to the cached outputs (drafting work: call it inside the clock)."""
        if self.stale:
            self.index = SuffixAutomaton(count_depth=self.depth)
            for tokens in self.outputs.values():
                self.index.extend_separated(tokens)
        else:
            for tokens in self.pending:
                self.index.extend_separated(tokens)
        self.stale, self.pending = False, []

    def add(self, key: tuple, tokens: list[int]) -> None:
        if self.limit == 0 or not tokens:
            return
        replaced = self.outputs.pop(key, None) is not None
        self.outputs[key] = tokens
        evicted = False
        while len(self.outputs) > self.limit:
            self.outputs.popitem(last=False)
            evicted = True
        self.stale |= replaced or evicted
        self.pending.append(tokens)

    def drop(self, key: tuple) -> None:
        if self.outputs.pop(key, None) is not None:
            self.stale = True


@dataclass(frozen=True)
class SuffixKnobs:  # defaults: conf/method/suffix.yaml
    shape: str
    max_depth: int
    max_spec_factor: float
    max_spec_offset: float
    min_token_prob: float
    max_cached: int
    reuse_same_prompt: bool


class Suffix(TreeMethod):
    name = "suffix"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        kn = knobs.read(cfg, SuffixKnobs)
        self.policy = sizing.pick(  # k=auto: the node count chosen per round from the scores
            self,
            lambda: auto.TreeChooser(sizing.max_k(self), kn.max_depth),
            lambda k: auto.FixedTree(kn.max_depth, None, int(k or 0)),
        )
        self.k = self.policy.max_nodes
        self.shape, self.max_depth = kn.shape, kn.max_depth
        self.factor, self.offset = kn.max_spec_factor, kn.max_spec_offset
        self.min_prob, self.max_cached = kn.min_token_prob, kn.max_cached
        self.reuse_same_prompt = kn.reuse_same_prompt
        for bad, msg in (
            (self.k < 1, f"k={self.k}: use an integer >= 1 (most tokens drafted)"),
            (
                self.shape not in SHAPES,
                f"method.shape={self.shape!r}: choose one of: {', '.join(SHAPES)}",
            ),
            (self.max_depth < 2, f"method.max_depth={self.max_depth}: use an integer >= 2"),
            (self.factor < 0, f"method.max_spec_factor={self.factor}: use a value >= 0"),
            (
                not 0 <= self.min_prob <= 1,
                f"method.min_token_prob={self.min_prob}: use a value in [0, 1]",
            ),
            (
                self.max_cached < 0,
                f"method.max_cached={self.max_cached}: use an integer >= 0 (0: no global cache)",
            ),
        ):
            if bad:
                raise UserError(f"method {self.name}: {msg}")
        self.responses = ResponseCache(self.max_cached, self.max_depth)
        self.info = {
            "shape": self.shape,
            "max_depth": self.max_depth,
            "max_cached": self.max_cached,
            "reuse_same_prompt": self.reuse_same_prompt,
        }

    def max_verify_width(self) -> int:
        return self.k + 1

    def static_bytes(self) -> int:
        return self.responses.index.nbytes()  # earlier outputs, as the last sync indexed them

    def state_bytes(self, state) -> int:
        return state.aux["local"].nbytes() if "local" in state.aux else 0

    # --- per turn ---
    def start(self, state) -> None:
        key = tuple(state.tokens.tolist())
        if not self.reuse_same_prompt:  # reuse_same_prompt: a warm workload, repeats meant to hit
            self.responses.enter(key)
            self.responses.drop(key)
        state.aux["prompt_key"] = key

    def draft_prefill(self, state, logits) -> None:
        self.responses.sync()  # the earlier turns' index work, timed here (ResponseCache)
        state.aux["local"] = SuffixAutomaton(state.tokens.tolist(), count_depth=self.max_depth)

    def finish(self, state) -> None:
        self.responses.add(
            state.aux["prompt_key"], state.ids[state.n_prompt : state.length].tolist()
        )

    # --- per round ---
    def draft(self, state) -> TreeProposal:
        local = state.aux["local"]
        L = state.length
        local.extend(state.ids[len(local) : L].tolist())
        longest = min(self.max_depth, L) - 1
        args = (
            self.k,
            self.factor,
            self.offset,
            self.min_prob,
            self.max_depth,
            self.shape == "tree",
        )
        best = speculate(local, *local.deep, longest, *args)
        glob = self.responses.index
        if len(glob):
            v, n = glob.match(state.ids[L - longest - 1 : L].tolist())
            other = speculate(glob, v, n, longest, *args)
            if other.score > best.score:
                best = other
        return self._sized(best, state.ids.device)

    def _sized(self, best: Draft, device) -> TreeProposal:
        """The policy's nodes of the draft (k=auto: the n best by calibrated probability, n
        maximising (1 + Σ ŝ)/T(n); a fixed k: all of them)."""
        policy = self.policy
        est = policy.calibrated(best.probs, best.parents, auto.depths_of(best.parents))
        order = policy.order(est)
        keep = sorted(order[: policy.size([est[i] for i in order], 0)])
        parents = auto.subtree(best.parents, keep)
        tokens = torch.tensor([best.tokens[j] for j in keep], dtype=torch.long, device=device)
        return TreeProposal(
            tokens=tokens,
            layout=TreeLayout.from_parents(parents),
            plan=Plan(reach=[best.probs[j] for j in keep]),
        )
