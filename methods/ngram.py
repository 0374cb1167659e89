"""`ngram`: prompt lookup decoding (Saxena 2023) — draft by copying from the context.

Find the most recent earlier occurrence of the last n committed tokens (n from max_n down to
min_n) in prompt + output, and propose the up-to-k tokens that followed it. The draft is a point
mass, so at T > 0 the accept rule is "accept x with probability p(x)".
With k=auto (methods.auto) each round proposes the length that maximises expected tokens
per second from the run's cost curve and the acceptance by depth measured for matches of the
same length n, at most max_k; none when no length pays.
Knobs: k (tokens proposed, or auto), max_k (auto's longest), min_n, max_n (n-gram window).
"""

from __future__ import annotations

import torch

from groundfloor.errors import UserError
from methods import sizing
from methods.auto import Plan
from methods.base import Method, Proposal


def lookup(tokens: torch.Tensor, k: int, min_n: int, max_n: int) -> tuple[torch.Tensor, int]:
    """tokens (L,) → (up to k tokens following the latest earlier match of the last n tokens,
    n; 0 when nothing matched)."""
    L = tokens.numel()
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        tail = tokens[L - n :]
        windows = tokens[: L - 1].unfold(0, n, 1)  # (L-n, n): windows that end before the tail
        hits = (windows == tail).all(-1).nonzero()
        if hits.numel():
            start = int(hits[-1]) + n  # first token after the matched window
            return tokens[start : start + k], n
    return tokens.new_empty(0), 0


class NGram(Method):
    name = "ngram"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.policy = sizing.chain(self)
        self.k, self.min_n, self.max_n = self.policy.max_k, int(cfg.min_n), int(cfg.max_n)
        if not 1 <= self.min_n <= self.max_n:
            raise UserError(
                f"method.min_n={self.min_n}, method.max_n={self.max_n}: need 1 <= min_n <= max_n"
            )

    def draft(self, state) -> Proposal:
        tokens, n = lookup(state.tokens, self.k, self.min_n, self.max_n)
        bucket = n or None  # k=auto's rates are kept per match length
        k = self.policy.length(bucket=bucket, cap=tokens.numel())
        return Proposal(tokens=tokens[:k], plan=Plan(bucket=bucket))
