"""`draft`: a separate small draft model proposes k tokens; the target verifies them at once.

The draft model keeps its own KV cache in `state.aux` covering a prefix of the committed tokens;
each round it first consumes the committed tokens it has not seen (1 or 2), then drafts k tokens
one forward at a time, sampling from q = probs(draft logits) with the target's sampling settings
(argmax at T = 0). After acceptance its cache is cropped to the accepted prefix.
The draft runs on the target's engine kind and activation dtype (engines/); our distilled drafts
score a reduced vocabulary, mapped to target ids by their `d2t`.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch

from drafters import draftmodel, selfdraft, storage, weights
from engines.load import load
from groundfloor.errors import UserError
from groundfloor.models import check_same_vocab, load_tokenizer, resolve_path
from groundfloor.sampling import probs, sample
from methods import auto, sizing
from methods.base import Method, Proposal


class Draft(Method):
    name = "draft"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        path = cfg.get("model") or ctx.model_cfg.get("draft")
        if not path:
            raise UserError(
                "method=draft needs a draft model: set model.draft=<HF id or directory>"
            )
        self.weights, own = "float", selfdraft.kind_of(path)
        vocab = cfg.get("draft_vocab")
        if own is None and vocab not in (None, "none"):
            raise UserError(
                f"method.draft_vocab={vocab!r} applies to self-drafts only (model.draft="
                "self:q4_1 or self:int4); use none"
            )
        if own is not None:  # the target's own 4-bit copy (drafters.selfdraft)
            self.policy = sizing.chain(self, steps_per_token=1, prior=auto.PRIOR)
            self.k = self.policy.max_k
            self.d2t = self._draft_vocab(cfg.get("draft_vocab"), ctx)
            self.model, what = selfdraft.load_engine(
                own, ctx.target, ctx.model_cfg, ctx.device, self.d2t
            )
            self.vocab = ctx.target.vocab_size
            self.info = {"drafter_weights": "int4", "draft_model": f"self:{own}: {what}"}
            return
        local = Path(resolve_path(str(path)))
        # k=auto: one draft forward per token; its rates start from the training summary's
        self.policy = sizing.chain(self, steps_per_token=1, prior=auto.trained_prior(local))
        self.k = self.policy.max_k
        if draftmodel.is_distilled(local):  # our distilled format: shares the target's embeddings
            if ctx.target.name == "lean":  # its layers in int8 where that pays (drafters.weights)
                head = draftmodel.head_weight(local)
                self.weights = weights.choose(ctx.drafter_weights, head, 1, ctx.device)
            self.model, self.d2t = draftmodel.load_engine(local, ctx.target, self.weights)
        else:
            dtype = str(ctx.target.dtype).removeprefix("torch.")
            self.model, _ = load(
                str(path), ctx.device, engine=ctx.target.name, dtype=dtype, kernel="aten"
            )
            check_same_vocab(
                ctx.tokenizer, load_tokenizer(str(path)), ctx.target, self.model, str(path)
            )
            self.d2t = None
        self.vocab = ctx.target.vocab_size
        self.info = {"drafter_weights": self.weights}

    @staticmethod
    def _draft_vocab(spec, ctx) -> torch.Tensor | None:
        """method.draft_vocab (self-drafts): none, or a drafter's folder (its d2t: the ids it
        drafts), or a model config's drafter by name (eagle3: the shipped head's)."""
        if spec in (None, "none"):
            return None
        path = ctx.model_cfg.get(str(spec)) or spec
        try:
            state = storage.read(Path(resolve_path(str(path))) / "model.safetensors")
            d2t = state["d2t"].long()
        except (OSError, KeyError) as e:
            raise UserError(
                f"method.draft_vocab={spec!r}: no draft vocabulary (d2t) there ({e}); use none, "
                "eagle3 or a drafter folder holding one"
            )
        if "t2d" in state:  # an EAGLE-3 head's file: offsets, target id = d + d2t[d]
            d2t = d2t + torch.arange(d2t.numel())
        return d2t

    def static_bytes(self) -> int:
        # the draft's own weights: a distilled draft's shared embeddings are the target's
        n = self.model.weight_bytes()
        if self.d2t is not None:  # counted by weight_bytes, but the target's storage
            n -= self.model.embed_weight.numel() * self.model.embed_weight.element_size()
        return n

    def state_bytes(self, state) -> int:
        return state.aux["draft_cache"].nbytes() if "draft_cache" in state.aux else 0

    def start(self, state) -> None:
        state.aux["draft_cache"] = self.model.new_cache(state.ids.numel() + self.k + 1)

    def _logits(self, out) -> torch.Tensor:
        """The draft's next-token logits on the target's ids (−inf where it cannot draft)."""
        lg = out.logits[0, -1]
        if self.d2t is not None:
            full = lg.new_full((self.vocab,), float("-inf"))
            return full.index_copy_(0, self.d2t, lg)
        if lg.shape[-1] >= self.vocab:  # a draft may pad its vocabulary differently
            return lg[: self.vocab]
        return torch.nn.functional.pad(lg, (0, self.vocab - lg.shape[-1]), value=float("-inf"))

    def draft_prefill(self, state, logits) -> None:
        self.model.forward(state.tokens[None], state.aux["draft_cache"], logits_to_keep=1)

    def draft(self, state) -> Proposal:
        """k tokens, one draft forward each; with k=auto the planned length from the rates by
        depth, cut short when the draft's top probability (read before its token is drawn, so
        the law of what is drafted is q's) says one more token cannot raise expected tokens per
        second."""
        dev = state.ids.device
        k = self.policy.length()
        walk = self.policy.walk()  # k=auto: stop where one more token cannot pay
        cache = state.aux["draft_cache"]
        inp = state.tokens[cache.length :][None]  # committed tokens the draft has not consumed
        sp, drafted, qs = state.sampling, [], []
        steps = 0
        for _ in range(k):
            out = self.model.forward(inp, cache, logits_to_keep=1)
            steps += 1
            own = sp.greedy and self.d2t is not None  # argmax in the draft's own vocabulary
            lg = out.logits[0, -1] if own else self._logits(out)
            q = None if sp.greedy else probs(lg, sp)
            if not walk.go(partial(confidence, lg, q)):
                break
            if q is not None:
                x = sample(q, state.generator)
                qs.append(q)
            else:
                x = int(self.d2t[lg.argmax()]) if own else int(lg.argmax())
            drafted.append(x)
            inp = torch.tensor([[x]], device=dev)
        tokens = torch.tensor(drafted, dtype=torch.long, device=dev)
        return Proposal(
            tokens=tokens,
            q=torch.stack(qs) if qs else None,
            steps=steps,
            plan=walk.plan(),
        )

    def observe(self, state, proposal, acc) -> None:
        # the draft cache holds committed tokens + x_1..x_{k-1}; keep committed + x_1..x_n
        cache = state.aux["draft_cache"]
        cache.crop(min(cache.length, state.length + acc.n_draft_accepted))


def confidence(logits: torch.Tensor, q: torch.Tensor | None) -> float:
    """The drafter's top probability before its token is drawn (q at T > 0, else the logits'
    softmax): what k=auto's early stop reads (methods.auto.chain.Walk)."""
    return float(q.max()) if q is not None else float(torch.softmax(logits.float(), -1).max())
