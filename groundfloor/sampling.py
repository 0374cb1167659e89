"""Sampling and the accept rules every method shares.

Target and draft distributions go through the same `probs()` (temperature → top-k → top-p), so
p and q are comparable. Greedy (temperature 0) compares argmaxes; sampling uses the speculative
rule of Leviathan et al. / Chen et al. for a chain of drafted tokens x_1..x_m:

    accept x_i with probability min(1, p_i(x_i) / q_i(x_i));
    at the first rejection emit y ~ norm(max(0, p_i − q_i)) and stop;
    if all m are accepted emit a bonus y ~ p_{m+1}.

A drafter without a distribution (n-gram lookup) is a point mass q = onehot(x): the rule becomes
"accept with probability p(x), else resample from p with x removed". Either way each emitted token
has marginal p exactly: P(y) = min(p, q)(y) + (1 − Σ min(p, q)) · norm(p − q)+(y) = p(y).
Trees (several candidates per position) use the same `residual` in `groundfloor.tree`; the rules,
their proofs and the statistical tests that guard them are in docs/sampling.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probs(logits: torch.Tensor, sp: SamplingParams) -> torch.Tensor:
    """(..., V) logits → (..., V) float32 probabilities after temperature, top-k and top-p."""
    x = logits.float() / max(sp.temperature, 1e-6)
    if sp.top_k and sp.top_k < x.shape[-1]:
        kth = torch.topk(x, sp.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if sp.top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=True)
        cum = torch.softmax(sorted_x, dim=-1).cumsum(-1)
        # drop a token when the mass before it already reaches top_p (the top-1 always stays)
        drop_sorted = (cum - torch.softmax(sorted_x, dim=-1)) >= sp.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return torch.softmax(x, dim=-1)


def sample(p: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from a (V,) distribution."""
    return int(torch.multinomial(p, 1, generator=generator))


def next_token(logits: torch.Tensor, sp: SamplingParams, generator: torch.Generator | None) -> int:
    """The target's own next token from (V,) logits: argmax, or a draw from probs()."""
    if sp.greedy:
        return int(logits.argmax())
    return sample(probs(logits, sp), generator)


def accept_greedy(logits: torch.Tensor, draft: torch.Tensor) -> tuple[int, int]:
    """logits (m+1, V) of the target at [last, x_1..x_m]; draft (m,). → (n accepted, next token)."""
    target = logits.argmax(-1)  # (m+1,)
    m = draft.numel()
    if m == 0:
        return 0, int(target[0])
    miss = (target[:m] != draft).nonzero()
    n = int(miss[0]) if miss.numel() else m
    return n, int(target[n])


def accept_chain(
    p: torch.Tensor, draft: torch.Tensor, q: torch.Tensor | None, generator: torch.Generator | None
) -> tuple[int, int]:
    """Speculative sampling over a chain.

    p (m+1, V): target probabilities at [last, x_1..x_m]; draft (m,); q (m, V) draft probabilities,
    or None for a point-mass drafter. → (n accepted, next token: residual sample or bonus).
    """
    m = draft.numel()
    if m:
        px = p[torch.arange(m), draft]  # p_i(x_i)
        qx = torch.ones_like(px) if q is None else q[torch.arange(m), draft]
        u = torch.rand(m, generator=generator, device=p.device)
        ok = u * qx < px  # u < p/q without dividing by a zero q
        rejected = (~ok).nonzero()
        if rejected.numel():
            n = int(rejected[0])
            qn = point_mass(draft[n], p.shape[-1], p) if q is None else q[n]
            return n, sample(residual(p[n], qn), generator)
    return m, sample(p[m], generator)


def point_mass(token, vocab: int, like: torch.Tensor) -> torch.Tensor:
    """onehot(token) as a (V,) distribution: the q of a drafter that proposes without sampling."""
    q = torch.zeros(vocab, dtype=like.dtype, device=like.device)
    q[token] = 1.0
    return q


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p − q)) for (V,) p, q: what to sample from after rejecting a draw from q.

    Point mass q = onehot(x): p with x zeroed, renormalised. If p ≤ q everywhere (p == q), a
    rejection has probability 0 in exact arithmetic; after rounding we fall back to p.
    """
    r = (p - q).clamp_min(0)
    total = r.sum()
    return r / total if total > 0 else p
