"""`sam`: SAM decoding — draft the continuation of the longest suffix match found by suffix
automata (Hu, Wang, Zhang, Zhang, Li, Chen, Zhang, "SAM Decoding: Speculative Decoding via Suffix
Automaton", ACL 2025, arXiv:2411.10666).

Two automata (drafters.suffix_automaton):
- dynamic: over this turn's prompt + output, built in prefill and extended as tokens are
  committed. Its match is the longest suffix of the text that occurred before: the suffix link
  of the whole text's state, found in O(1); the draft is the k tokens that followed that
  suffix's first occurrence (the paper keeps one end position per state, the earliest);
- static (optional, `corpus`): over a fixed text corpus, matched incrementally as tokens are
  committed (matching statistics, amortised O(1) per token); the draft follows the match's
  earliest occurrence in the corpus, up to the end of its document.
The longer match drafts (ties: dynamic). Below `min_match` matched tokens nothing is drafted, or,
with `fallback: eagle` (or eagle3, medusa), that method drafts its tree instead — the combination
Spec-Bench ranks first (SAM-Decoding + EAGLE-2). The fallback keeps its own state in step: every
round is verified through it (a chain draft as a one-branch tree), so it sees the target's hidden
states of every committed token.
Drafts are point masses fixed before verification: lossless at any temperature (groundfloor.tree).
Knobs: k (tokens drafted), min_match (null: 1 alone, 3 with a fallback), corpus (a text file,
one document per line, or a .jsonl of {"text": ...}), fallback, fallback_overrides.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from drafters.suffix_automaton import SuffixAutomaton
from groundfloor.errors import UserError
from groundfloor.tree import TreeLayout
from methods import knobs, sizing
from methods.auto import Plan
from methods.base import TreeMethod, TreeProposal
from methods.registry import build_method, method_config

FALLBACKS = ("eagle", "eagle3", "medusa")
MATCH_BUCKETS = 8  # k=auto keeps acceptance rates for match lengths 1..7 and 8 or more


def read_corpus(path: Path, tokenizer) -> list[list[int]]:
    """Token ids of each document: one per line of a text file, or each {"text": ...} line."""
    docs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        text = json.loads(line)["text"] if path.suffix == ".jsonl" else line
        docs.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return docs


@dataclass(frozen=True)
class SamKnobs:  # defaults: conf/method/sam.yaml
    min_match: int | None
    corpus: str | None
    fallback: str | None
    fallback_overrides: dict


class Sam(TreeMethod):
    name = "sam"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.policy = sizing.chain(self)  # k=auto: rates kept per match length
        self.k = self.policy.max_k
        self.fallback = None
        kn = knobs.read(cfg, SamKnobs)
        fb = kn.fallback
        if fb:
            self.fallback = self._build_fallback(fb, kn.fallback_overrides, ctx)
            self.name = f"sam+{fb}"
        mm = kn.min_match
        self.min_match = mm if mm is not None else (3 if self.fallback else 1)
        if self.min_match < 1:
            raise UserError(f"method.min_match={self.min_match}: use an integer >= 1")
        self.static = None
        if kn.corpus:
            self.static = self._load_corpus(Path(kn.corpus), ctx)
        self.info = {
            "k": ctx.k(cfg),
            "min_match": self.min_match,
            "fallback": fb or None,
            "corpus_tokens": len(self.static) if self.static else 0,
        }
        if self.fallback is not None:
            self.info["fallback_info"] = getattr(self.fallback, "info", {})

    @staticmethod
    def _build_fallback(name: str, overrides, ctx):
        if name not in FALLBACKS:
            raise UserError(
                f"method.fallback={name!r}: choose one of: {', '.join(FALLBACKS)} (or null)"
            )
        node = method_config(name, overrides)
        # the top-level `k` sets the automaton's draft length, not the fallback's depth
        return build_method(node, dataclasses.replace(ctx, k_override=None))

    def _load_corpus(self, path: Path, ctx) -> SuffixAutomaton:
        if not path.is_file():
            raise UserError(
                f"method.corpus={str(path)!r} is not a file; give a text file (one "
                f'document per line) or a .jsonl of {{"text": ...}}'
            )
        if ctx.tokenizer is None:
            raise UserError("method.corpus needs the target's tokenizer")
        index = SuffixAutomaton()
        for doc in read_corpus(path, ctx.tokenizer):
            index.extend_separated(doc)
        return index

    def max_verify_width(self) -> int:
        own = self.k + 1
        return max(own, self.fallback.max_verify_width()) if self.fallback else own

    def static_bytes(self) -> int:
        n = self.static.nbytes() if self.static else 0
        return n + (self.fallback.static_bytes() if self.fallback else 0)

    def state_bytes(self, state) -> int:
        n = state.aux["sam"].nbytes() if "sam" in state.aux else 0
        return n + (self.fallback.state_bytes(state) if self.fallback else 0)

    # --- per turn ---
    def start(self, state) -> None:
        if self.fallback:
            self.fallback.start(state)

    def prefill(self, state) -> torch.Tensor:
        return (self.fallback or super()).prefill(state)

    def draft_prefill(self, state, logits) -> None:
        if self.fallback:
            self.fallback.draft_prefill(state, logits)
        prompt = state.tokens.tolist()
        state.aux["sam"] = SuffixAutomaton(prompt)
        if self.static:
            state.aux["static_match"] = self.static.match(prompt)

    def force_drafting(self, on: bool) -> None:
        super().force_drafting(on)
        if self.fallback:
            self.fallback.force_drafting(on)

    def calibrate(self, costs: dict, drafting: tuple = (0.0, 0.0, 0.0)) -> bool:
        super().calibrate(costs, (0.0, *drafting[1:]))  # its own drafting is a lookup
        return self.fallback.calibrate(costs, drafting) if self.fallback else False

    def ready(self, key: tuple | None = None) -> None:
        super().ready(key)
        if self.fallback is not None:
            self.fallback.ready(key)

    def learn(self, proposal, acc, seconds=None, verify_s=None) -> None:
        if proposal.plan.bucket is not None:  # a round the automaton drafted
            super().learn(proposal, acc, seconds, verify_s)
        elif self.fallback is not None:  # (its policy ignores rounds it did not draft)
            self.fallback.learn(proposal, acc, seconds, verify_s)

    def observe(self, state, proposal, acc) -> None:
        (self.fallback or super()).observe(state, proposal, acc)

    # --- per round ---
    def _match(self, state) -> tuple[list[int], int]:
        """(the draft of the longer match, its length), after indexing the new tokens."""
        dyn = state.aux["sam"]
        new = state.ids[len(dyn) : state.length].tolist()
        dyn.extend(new)
        u = dyn.link[dyn.end]  # the longest suffix of the text that occurred before
        n = dyn.length[u]
        start = dyn.first[u] + 1
        draft = dyn.tokens[start : start + self.k] if n else []
        if self.static:
            v, m = state.aux["static_match"] = self.static.match(new, *state.aux["static_match"])
            if m > n:
                corpus, i = self.static.tokens, self.static.first[v] + 1
                n, draft = m, []
                while i < len(corpus) and corpus[i] >= 0 and len(draft) < self.k:
                    draft.append(corpus[i])  # (negative ids: a document boundary)
                    i += 1
        return draft, n

    def draft(self, state) -> TreeProposal:
        draft, n = self._match(state)
        if n < self.min_match:
            if self.fallback:
                return self.fallback.draft(state)
            draft = []
        bucket = min(n, MATCH_BUCKETS) if draft else None  # k=auto's rates per match length
        draft = draft[: self.policy.length(bucket=bucket, cap=len(draft))]
        tokens = torch.tensor(draft, dtype=torch.long, device=state.ids.device)
        return TreeProposal(
            tokens=tokens, layout=TreeLayout.chain(len(draft)), plan=Plan(bucket=bucket)
        )

    def verify(self, state, proposal):
        return (self.fallback or super()).verify(state, proposal)

    def accept(self, state, proposal, verified):
        if self.fallback:
            return self.fallback.accept(state, proposal, verified)
        return super().accept(state, proposal, verified)
