"""`draft`: a separate small draft model proposes k tokens; the target verifies them at once.

The draft model keeps its own KV cache in `state.aux` covering a prefix of the committed tokens;
each round it first consumes the committed tokens it has not seen (1 or 2), then drafts k tokens
one forward at a time, sampling from q = probs(draft logits) with the target's sampling settings
(argmax at T = 0). After acceptance its cache is cropped to the accepted prefix.
"""
from __future__ import annotations

from pathlib import Path

import torch

from bench import kvcache
from bench.errors import UserError
from bench.models import check_same_vocab, load_model, resolve_path
from bench.train import draftmodel
from bench.sampling import next_token, probs, sample
from methods.base import Accepted, Method, Proposal


class Draft(Method):
    name = "draft"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.k = int(ctx.k(cfg))
        path = cfg.get("model") or ctx.model_cfg.get("draft")
        if not path:
            raise UserError("method=draft needs a draft model: set model.draft=<HF id or directory>")
        local = Path(resolve_path(str(path)))
        if draftmodel.is_distilled(local):  # our distilled format: shares the target's embeddings
            self.model = draftmodel.load(local, ctx.target, ctx.dtype)
        else:
            self.model, tok = load_model(str(path), ctx.device, ctx.dtype)
            check_same_vocab(ctx.tokenizer, tok, ctx.target, self.model, str(path))
        self.vocab = ctx.target.config.vocab_size

    def extra_bytes(self, state=None) -> int:
        # parameters and buffers only: a distilled draft's shared embeddings are the target's
        n = sum(t.numel() * t.element_size() for t in self.model.parameters())
        n += sum(t.numel() * t.element_size() for t in self.model.buffers())
        if state is not None and "draft_cache" in state.aux:
            n += kvcache.cache_bytes(state.aux["draft_cache"])
        return n

    def start(self, state) -> None:
        state.aux["draft_cache"] = kvcache.new_cache()

    def _logits(self, out) -> torch.Tensor:
        # a draft may pad its vocabulary differently; compare on the target's ids
        lg = out.logits[0, -1]
        if lg.shape[-1] >= self.vocab:
            return lg[: self.vocab]
        return torch.nn.functional.pad(lg, (0, self.vocab - lg.shape[-1]), value=float("-inf"))

    def prefill(self, state) -> torch.Tensor:
        logits = super().prefill(state)
        cache = state.aux["draft_cache"]
        kvcache.forward(self.model, state.tokens[None], cache, logits_to_keep=1)
        return logits

    def draft(self, state) -> Proposal:
        cache = state.aux["draft_cache"]
        seen = kvcache.cache_len(cache)
        inp = state.tokens[seen:][None]  # committed tokens the draft has not consumed
        sp, drafted, qs = state.sampling, [], []
        for _ in range(self.k):
            lg = self._logits(kvcache.forward(self.model, inp, cache, logits_to_keep=1))
            if sp.greedy:
                x = int(lg.argmax())
            else:
                q = probs(lg, sp)
                x = sample(q, state.generator)
                qs.append(q)
            drafted.append(x)
            inp = torch.tensor([[x]], device=state.ids.device)
        tokens = torch.tensor(drafted, dtype=torch.long, device=state.ids.device)
        return Proposal(tokens=tokens, q=torch.stack(qs) if qs else None)

    def accept(self, state, proposal, logits) -> Accepted:
        acc = super().accept(state, proposal, logits)
        # the draft cache holds committed tokens + x_1..x_{k-1}; keep committed + x_1..x_n
        cache = state.aux["draft_cache"]
        kvcache.crop(cache, min(kvcache.cache_len(cache), state.length + acc.n_draft_accepted))
        return acc
