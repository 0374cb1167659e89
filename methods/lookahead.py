"""`lookahead`: Lookahead decoding — Jacobi iterations in a 2-D window feed an n-gram pool whose
n-grams are verified, both in the same forward (Fu, Bailis, Stoica, Zhang, "Break the Sequential
Dependency of LLM Inference Using Lookahead Decoding", ICML 2024, arXiv:2402.02057).

The window holds up to N − 1 levels of W guessed tokens (level 0 seeded from prompt tokens).
Below the root r (the last committed token), level 0 is a chain r → w0[0] → … → w0[W−1], and
level j of column c hangs below level j − 1 of column c, so the window token (j, c) sits at
depth c + 1 + j and sees  r, w0[0..c], w1[c], …, wj[c]  — one Jacobi trajectory per column.
One forward (a tree, methods.treeverify) carries

    verification branch  the pool's n-grams that start with r (the G most recent), merged into
                         a trie below r: the draft, accepted with the shared tree rule;
    lookahead branch     the window, never accepted: its rows only produce the next guesses.

After the forward each column's last level predicts one new token (the target's argmax).
Once N − 1 levels exist, the column (w0[c], …, w_{N−2}[c], new[c]) is an n-gram: its first token
keys it in the pool, the other N − 1 are what it proposes; then level 0 is dropped and the new
tokens become the last level. Until then (warm-up) the new tokens are appended as a level.
With `pool_from_prompt` (LADE's POOL_FROM_PROMPT) the pool starts with the prompt's own
n-grams. The window and the pool belong to the turn (state.aux). Drafts are point masses fixed
before the forward that verifies them, so the tree rule keeps the target's distribution at any
temperature, and greedy output equals `ar`'s.
Knobs: W (window), N (n-gram size; `k` sets N = k + 1), G (verification n-grams per round, and
n-grams kept per first token), pool_from_prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from groundfloor.errors import UserError
from groundfloor.tree import TreeLayout
from methods import knobs
from methods.base import TreeMethod, TreeProposal


def trie(grams: list[tuple[int, ...]]) -> tuple[list[int], list[int]]:
    """n-grams below the root merged on shared prefixes → (tokens, parents (−1: the root))."""
    tokens, parents, node = [], [], {}
    for g in grams:
        parent = -1
        for x in g:
            key = (parent, x)
            if key not in node:
                node[key] = len(tokens)
                tokens.append(x)
                parents.append(parent)
            parent = node[key]
    return tokens, parents


def window_parents(levels: int, W: int, offset: int) -> list[int]:
    """Parents of the window's nodes, level by level, numbered from `offset`."""
    out = []
    for j in range(levels):
        for c in range(W):
            if j:
                out.append(offset + (j - 1) * W + c)  # same column, one level up
            else:
                out.append(offset + c - 1 if c else -1)  # level 0: a chain below the root
    return out


@dataclass(frozen=True)
class LookaheadKnobs:  # defaults: conf/method/lookahead.yaml
    W: int
    N: int
    G: int
    pool_from_prompt: bool


class Lookahead(TreeMethod):
    name = "lookahead"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        k = ctx.k(cfg)
        knobs.need(
            self,
            k != "auto",
            "k",
            k,
            "lookahead's verify is its Jacobi window (W, G, N): give an integer (N = k + 1) or "
            "leave k unset",
        )
        kn = knobs.read(cfg, LookaheadKnobs)
        self.W, self.G = kn.W, kn.G
        self.N = k + 1 if k is not None else kn.N
        if self.W < 1 or self.N < 2 or self.G < 0:
            raise UserError(
                f"method {self.name}: W={self.W}, N={self.N}, G={self.G}: need "
                f"W >= 1, N >= 2 (k >= 1), G >= 0"
            )
        self.pool_from_prompt = kn.pool_from_prompt
        self.info = {
            "W": self.W,
            "N": self.N,
            "G": self.G,
            "pool_from_prompt": self.pool_from_prompt,
        }

    def max_verify_width(self) -> int:
        return 1 + (self.W + self.G) * (self.N - 1)

    # --- per turn ---
    def draft_prefill(self, state, logits) -> None:
        g = torch.Generator().manual_seed(0)  # not the sampling generator: draws stay the same
        seed = torch.randint(state.n_prompt, (self.W,), generator=g)
        state.aux["window"] = [state.ids[seed.to(state.ids.device)].tolist()]
        state.aux["pool"] = {}  # first token → n-gram tails, oldest first
        if self.pool_from_prompt:
            prompt = state.tokens.tolist()
            for i in range(len(prompt) - self.N + 1):
                self._remember(state.aux["pool"], prompt[i], tuple(prompt[i + 1 : i + self.N]))

    def _remember(self, pool: dict, first: int, tail: tuple) -> None:
        """Keep the G most recent distinct tails per first token."""
        tails = pool.setdefault(first, [])
        if tail in tails:
            tails.remove(tail)
        tails.append(tail)
        del tails[: -self.G or None]

    # --- per round ---
    def draft(self, state) -> TreeProposal:
        root = int(state.ids[state.length - 1])
        grams = state.aux["pool"].get(root, [])[::-1][: self.G]  # the most recent first
        tokens, parents = trie(grams)
        window = state.aux["window"]
        parents += window_parents(len(window), self.W, len(tokens))
        tokens += [x for level in window for x in level]
        return TreeProposal(
            tokens=torch.tensor(tokens, dtype=torch.long, device=state.ids.device),
            layout=TreeLayout.from_parents(parents),
            n_draft=len(tokens) - len(window) * self.W,
        )

    def after_accept(self, state, proposal, nodes, logits, hidden) -> None:
        window, pool = state.aux["window"], state.aux["pool"]
        last = 1 + proposal.n_draft + (len(window) - 1) * self.W  # row of (last level, column 0)
        new = logits[last : last + self.W].argmax(-1).tolist()
        if len(window) < self.N - 1:
            window.append(new)
            return
        for c in range(self.W):
            self._remember(pool, window[0][c], tuple(level[c] for level in window[1:]) + (new[c],))
        window.pop(0)
        window.append(new)
