"""Sampling at T > 0 is lossless: emitted tokens have exactly the target's distribution.

A synthetic target and draft (vocabulary 10, next-token logits a function of the last two tokens
and the position) let us compute the exact marginal of the target at positions 1–3 by
enumeration. Each test drives a real accept rule (`accept_chain`, `accept_tree`) through many
thousands of speculative rounds from a fixed seed and compares the emitted tokens at each position
with that marginal (chi-square goodness of fit, rare cells pooled; a token the target cannot emit
fails outright). Lossless rules must pass (p > 1e-3); the planted bugs at the bottom must be
caught (p < 1e-6) by the same test.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy.stats import chisquare

from groundfloor.sampling import (
    SamplingParams,
    accept_chain,
    accept_greedy,
    point_mass,
    probs,
    residual,
    sample,
)
from groundfloor.tree import Tree, accept_tree, accept_tree_greedy, parents_from_paths

V = 10
POSITIONS = 3
ROUNDS = 6000
PASS, CAUGHT = 1e-3, 1e-6


class Synthetic:
    """logits(ctx) = A[last] + B[second-to-last] + C[len(ctx)]; index V stands for "none"."""

    def __init__(self, seed: int, scale: float = 1.5):
        g = torch.Generator().manual_seed(seed)
        self.A, self.B, self.C = (
            torch.randn(n, V, generator=g) * scale for n in (V + 1, V + 1, 16)
        )

    def perturbed(self, seed: int, noise: float) -> "Synthetic":
        """A draft: the same tables plus noise, so it agrees with the target only in part."""
        other = Synthetic(seed, noise)
        other.A, other.B, other.C = self.A + other.A, self.B + other.B, self.C + other.C
        return other

    def logits(self, ctx: torch.Tensor) -> torch.Tensor:
        """ctx (N, d) long → (N, V)."""
        n, d = ctx.shape
        none = torch.full((n,), V, dtype=torch.long)
        last = ctx[:, -1] if d >= 1 else none
        prev = ctx[:, -2] if d >= 2 else none
        return self.A[last] + self.B[prev] + self.C[d]


def exact_marginals(target: Synthetic, sp: SamplingParams, positions: int) -> list[torch.Tensor]:
    """[P(y_1), P(y_2), ...]: P(y_j) = Σ_{x_<j} Π_i p(x_i | x_<i) · p(y_j | x_<j), enumerated."""
    out = []
    for j in range(positions):
        ctx = torch.tensor(list(itertools.product(range(V), repeat=j)), dtype=torch.long).reshape(
            V**j, j
        )
        w = torch.ones(ctx.shape[0], dtype=torch.float64)
        for i in range(j):
            w *= probs(target.logits(ctx[:, :i]), sp).double()[torch.arange(len(ctx)), ctx[:, i]]
        out.append((w[:, None] * probs(target.logits(ctx), sp).double()).sum(0))
    return out


def gof_pvalue(tokens: torch.Tensor, expected: torch.Tensor) -> float:
    """Chi-square goodness of fit of (N,) tokens to (V,) probabilities; cells with expected
    count < 5 are pooled into one (merged with the smallest cell if the pool is still < 5)."""
    obs = torch.bincount(tokens, minlength=V).double()
    if obs[expected == 0].sum() > 0:
        return 0.0
    exp = expected * len(tokens)
    keep = exp >= 5
    o, e = obs[keep].tolist(), exp[keep].tolist()
    if (~keep).any():
        po, pe = float(obs[~keep].sum()), float(exp[~keep].sum())
        if pe >= 5 or not e:
            o.append(po)
            e.append(pe)
        elif pe > 0:
            i = min(range(len(e)), key=e.__getitem__)
            o[i], e[i] = o[i] + po, e[i] + pe
    if len(o) < 2:
        return 1.0
    e = [x * sum(o) / sum(e) for x in e]  # same total, as chisquare requires
    return float(chisquare(o, e).pvalue)


def emitted(round_fn, rounds: int, seed: int) -> torch.Tensor:
    """(rounds, POSITIONS) tokens: each trial runs speculative rounds until it has emitted
    POSITIONS tokens; round_fn(ctx (B, d), generator) → one emitted list per row."""
    g = torch.Generator().manual_seed(seed)
    seqs: list[list[int]] = [[] for _ in range(rounds)]
    while True:
        short = [i for i, s in enumerate(seqs) if len(s) < POSITIONS]
        if not short:
            return torch.tensor([s[:POSITIONS] for s in seqs])
        for d in sorted({len(seqs[i]) for i in short}):
            rows = [i for i in short if len(seqs[i]) == d]
            ctx = torch.tensor([seqs[i] for i in rows], dtype=torch.long).reshape(len(rows), d)
            for i, out in zip(rows, round_fn(ctx, g)):
                seqs[i].extend(out)


def min_pvalue(round_fn, target: Synthetic, sp: SamplingParams, rounds=ROUNDS, seed=0) -> float:
    toks = emitted(round_fn, rounds, seed)
    exact = exact_marginals(target, sp, POSITIONS)
    return min(gof_pvalue(toks[:, j], exact[j]) for j in range(POSITIONS))


# --- drafters and rounds over the synthetic models -------------------------------------------


def chain_round(target, draft, sp, k=2, accept=accept_chain, mode="sample"):
    """mode: "sample" x ~ q; "point" a deterministic drafter (argmax of the draft logits, q=None,
    like n-gram lookup); "argmax-with-q" the #32867 bug: argmax drafted, q claimed."""

    def round_(ctx, g):
        cur, xs, qs = ctx, [], []
        for _ in range(k):
            lg = draft.logits(cur)
            q = probs(lg, sp)
            x = torch.multinomial(q, 1, generator=g)[:, 0] if mode == "sample" else lg.argmax(-1)
            xs.append(x), qs.append(q)
            cur = torch.cat([cur, x[:, None]], 1)
        d = ctx.shape[1]
        p = torch.stack([probs(target.logits(cur[:, : d + i]), sp) for i in range(k + 1)], 1)
        xs, qs = torch.stack(xs, 1), torch.stack(qs, 1)
        out = []
        for b in range(len(ctx)):
            n, y = accept(p[b], xs[b], None if mode == "point" else qs[b], g)
            out.append(xs[b, :n].tolist() + [y])
        return out

    return round_


def draw_siblings(q: torch.Tensor, logits: torch.Tensor, n: int, mode: str, g) -> torch.Tensor:
    """(B, V) → (B, n) sibling tokens in draw order: "iid" with replacement, "wor" without
    replacement (one at a time), "point" the top-n of the draft logits."""
    if mode == "iid":
        return torch.multinomial(q, n, replacement=True, generator=g)
    if mode == "point":
        return logits.topk(n, -1).indices
    left, out = q.clone(), []
    for _ in range(n):
        x = torch.multinomial(left, 1, generator=g)[:, 0]
        left[torch.arange(len(x)), x] = 0
        out.append(x)
    return torch.stack(out, 1)


TREES = {  # static shapes as slot paths, as Medusa/EAGLE write them
    "binary2": [(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)],
    "ragged": [(0,), (1,), (2,), (0, 0), (0, 1), (0, 2), (2, 0), (0, 0, 0)],
}


def tree_round(target, draft, sp, shape, mode, accept=accept_tree):
    paths, parents = parents_from_paths(TREES[shape])
    fanout = {}
    for p in paths:
        fanout[p[:-1]] = max(fanout.get(p[:-1], 0), p[-1] + 1)

    def round_(ctx, g):
        b = len(ctx)
        node_ctx, tok, qrow, base = {(): ctx}, {}, {}, {}
        for path in paths:
            parent = path[:-1]
            if parent not in base:  # draw all children of `parent` at once, in order
                lg = draft.logits(node_ctx[parent])
                base[parent] = probs(lg, sp)
                kids = draw_siblings(base[parent], lg, fanout[parent], mode, g)
                for s in range(fanout[parent]):
                    tok[parent + (s,)] = kids[:, s]
            qrow[path] = base[parent]
            node_ctx[path] = torch.cat([node_ctx[parent], tok[path][:, None]], 1)
        p = torch.stack(
            [probs(target.logits(node_ctx[()]), sp)]
            + [probs(target.logits(node_ctx[q]), sp) for q in paths],
            1,
        )
        tokens = torch.stack([tok[q] for q in paths], 1)  # (B, n)
        qs = torch.stack([qrow[q] for q in paths], 1)  # (B, n, V)
        out = []
        for i in range(b):
            tree = Tree(parents, tokens[i], None if mode == "point" else qs[i], mode == "wor")
            path, y = accept(p[i], tree, g)
            out.append(tokens[i, path].tolist() + [y])
        return out

    return round_


pytestmark = pytest.mark.usefixtures("one_thread")  # many small ops: a second thread only waits


TARGET = Synthetic(0)
DRAFT = TARGET.perturbed(1, 1.2)

CHAIN_SETTINGS = [
    SamplingParams(1.0),
    SamplingParams(0.6),
    SamplingParams(1.6, top_p=0.8),
    SamplingParams(1.0, top_k=4),
]


# --- lossless rules pass ---------------------------------------------------------------------


@pytest.mark.parametrize("sp", CHAIN_SETTINGS, ids=str)
def test_chain_rule_emits_target_marginals(sp):
    assert min_pvalue(chain_round(TARGET, DRAFT, sp, k=2), TARGET, sp) > PASS


@pytest.mark.parametrize("sp", [SamplingParams(1.0), SamplingParams(0.7, top_p=0.8)], ids=str)
def test_point_mass_drafter_emits_target_marginals(sp):
    """n-gram style: accept x with p(x), else resample from p with x removed."""
    assert min_pvalue(chain_round(TARGET, DRAFT, sp, k=3, mode="point"), TARGET, sp) > PASS


def test_chain_as_tree_emits_target_marginals():
    sp = SamplingParams(1.0, top_p=0.9)

    def as_tree(p, draft, q, g):
        path, y = accept_tree(p, Tree.chain(draft, q), g)
        return len(path), y

    assert min_pvalue(chain_round(TARGET, DRAFT, sp, k=2, accept=as_tree), TARGET, sp) > PASS


@pytest.mark.parametrize(
    "shape,mode,sp",
    [
        ("binary2", "iid", SamplingParams(1.0)),
        ("ragged", "iid", SamplingParams(1.3, top_p=0.8)),
        ("binary2", "wor", SamplingParams(0.8)),
        ("ragged", "wor", SamplingParams(1.0, top_k=5)),
        ("binary2", "point", SamplingParams(1.0, top_p=0.85)),
        ("ragged", "point", SamplingParams(0.6)),
    ],
    ids=lambda v: str(v),
)
def test_tree_rule_emits_target_marginals(shape, mode, sp):
    assert min_pvalue(tree_round(TARGET, DRAFT, sp, shape, mode), TARGET, sp) > PASS


# --- deterministic properties ----------------------------------------------------------------


def test_residual_and_point_mass():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.1, 0.6, 0.2, 0.1])
    assert torch.allclose(residual(p, q), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert torch.allclose(residual(p, point_mass(0, 4, p)), torch.tensor([0, 0.6, 0.4, 0]))
    assert torch.equal(residual(p, p), p)  # nothing to resample from: fall back to p


def test_chain_rule_accepts_a_perfect_draft_and_rejects_impossible_tokens():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, V, generator=g), -1)
    x = torch.tensor([1, 2, 3])
    for _ in range(50):  # q == p: ratio 1, every token accepted, bonus from p[3]
        assert accept_chain(p, x, p[:3], g)[0] == 3
    p0 = p.clone()
    p0[1, 2] = 0
    p0[1] /= p0[1].sum()
    for _ in range(50):  # p(x_2) = 0: never accepted, and never emitted by the resample
        n, y = accept_chain(p0, x, None, g)
        assert n <= 1 and (n == 0 or y != 2)


def test_greedy_tree_follows_argmax_and_matches_chain():
    g = torch.Generator().manual_seed(1)
    for _ in range(30):
        m = int(torch.randint(0, 5, (1,), generator=g))
        logits = torch.randn(m + 1, V, generator=g)
        draft = torch.where(
            torch.rand(m, generator=g) < 0.7,
            logits[:m].argmax(-1),
            torch.randint(0, V, (m,), generator=g),
        )
        path, y = accept_tree_greedy(logits, Tree.chain(draft))
        assert (len(path), y) == accept_greedy(logits, draft)
    paths, parents = parents_from_paths([(0,), (1,), (1, 0), (1, 1)])
    tokens = torch.tensor([5, 7, 2, 4])
    scores = torch.full((5, V), -1.0)
    scores[0, 7] = scores[2, 4] = scores[4, 3] = 1.0  # root → 7 (node 1) → 4 (node 3) → emit 3
    assert accept_tree_greedy(scores, Tree(parents, tokens)) == ([1, 3], 3)


def test_tree_shape_and_validation():
    paths, parents = parents_from_paths([(1, 0), (0,), (1,), (0, 0), (0, 0, 0)])
    assert paths == [(0,), (1,), (0, 0), (1, 0), (0, 0, 0)]
    assert parents == [-1, -1, 0, 1, 2]
    t = Tree(parents, torch.arange(5))
    assert t.children() == [[0, 1], [2], [3], [4], [], []]
    assert t.depths() == [1, 1, 2, 2, 3]
    assert Tree.chain(torch.tensor([4, 5, 6])).parents == [-1, 0, 1]
    with pytest.raises(ValueError):
        parents_from_paths([(0, 1)])
    with pytest.raises(ValueError):
        Tree([-1, 2, 0], torch.arange(3))
    with pytest.raises(ValueError):
        Tree([-1, 0], torch.arange(2), q=torch.ones(3, V))


def test_same_seed_same_tokens_from_the_accept_rules():
    p = torch.softmax(torch.randn(9, V, generator=torch.Generator().manual_seed(2)), -1)
    paths, parents = parents_from_paths(TREES["ragged"])
    tree = Tree(parents, torch.arange(len(paths)) % V, p[1:], without_replacement=True)

    def draws(seed):
        g = torch.Generator().manual_seed(seed)
        return [accept_tree(p, tree, g) for _ in range(20)] + [
            accept_chain(p[:4], torch.tensor([1, 2, 3]), p[1:4], g) for _ in range(20)
        ]

    assert draws(5) == draws(5) and draws(5) != draws(6)


# --- planted bugs are caught by the same test ------------------------------------------------


def chain_no_residual(p, draft, q, g):
    """Bug: on rejection resample from p instead of norm(max(0, p − q))."""
    m = draft.numel()
    for i in range(m):
        qx = 1.0 if q is None else float(q[i, draft[i]])
        if float(torch.rand(1, generator=g)) * qx >= float(p[i, draft[i]]):
            return i, sample(p[i], g)
    return m, sample(p[m], g)


def chain_ratio_without_min(p, draft, q, g):
    """Bug: the ratio p/q is used without min(1, ·); to make it a probability it is divided by
    its largest value (textbook rejection sampling's envelope, lossless only with retries)."""
    m = draft.numel()
    for i in range(m):
        ratio = p[i] / q[i].clamp_min(1e-12)
        if float(torch.rand(1, generator=g)) >= float(ratio[draft[i]] / ratio.max()):
            return i, sample(residual(p[i], q[i]), g)
    return m, sample(p[m], g)


def tree_wor_without_removal(p, tree, g):
    """Bug: siblings drawn without replacement, verified as if drawn with replacement."""
    return accept_tree(p, Tree(tree.parents, tree.tokens, tree.q, False), g)


def tree_no_residual(p, tree, g):
    """Bug: a rejected sibling leaves the target unchanged for the next sibling (r stays p)."""
    kids, row, path = tree.children(), 0, []
    while True:
        for c in kids[row]:
            s = tree.q[c] if tree.q is not None else point_mass(tree.tokens[c], p.shape[-1], p)
            x = int(tree.tokens[c])
            if float(torch.rand(1, generator=g)) * float(s[x]) < float(p[row, x]):
                path.append(c)
                row = c + 1
                break
        else:
            return path, sample(p[row], g)


SP = SamplingParams(1.0)


@pytest.mark.parametrize(
    "accept", [chain_no_residual, chain_ratio_without_min], ids=["no-residual", "ratio-without-min"]
)
def test_planted_chain_bug_is_caught(accept):
    assert min_pvalue(chain_round(TARGET, DRAFT, SP, k=2, accept=accept), TARGET, SP) < CAUGHT


def test_greedy_draft_with_sampled_ratio_is_caught():
    """transformers #32867: the drafter took argmax while the ratio assumed x ~ q."""
    rf = chain_round(TARGET, DRAFT, SP, k=2, mode="argmax-with-q")
    assert min_pvalue(rf, TARGET, SP) < CAUGHT


def test_point_mass_without_residual_is_caught():
    """n-gram drafter: rejecting x but resampling from p (x not removed)."""
    rf = chain_round(TARGET, DRAFT, SP, k=3, mode="point", accept=chain_no_residual)
    assert min_pvalue(rf, TARGET, SP) < CAUGHT


@pytest.mark.parametrize(
    "mode,accept",
    [("wor", tree_wor_without_removal), ("iid", tree_no_residual), ("point", tree_no_residual)],
    ids=["wor-q-not-updated", "iid-no-residual", "point-no-residual"],
)
def test_planted_tree_bug_is_caught(mode, accept):
    rf = tree_round(TARGET, DRAFT, SP, "binary2", mode, accept=accept)
    assert min_pvalue(rf, TARGET, SP) < CAUGHT
