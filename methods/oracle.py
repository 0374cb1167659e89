"""`oracle`: a drafter that knows the answer — the upper bound of speculation on this machine.

Before each turn (in `start`, which the loop runs outside the clock) the oracle decodes the
target's own greedy continuation of the prompt, one token per forward on a cache of its own.
Each round it proposes the next k tokens of that continuation: at T = 0 every draft is
accepted and τ reaches k + 1, so the measured speedup is what a perfect chain drafter of
length k gets from this engine's verify cost c(k + 1) (minus nothing for drafting, which is
free). Should the output ever leave the continuation (a near-tie that the verify forward
rounds the other way), the oracle stops proposing for the rest of the turn. At T > 0 its
drafts are point masses, accepted with probability p(x): still lossless, no longer perfect.
It is a bound, not a method (`bound = True`): the report and the console mark it so
(methods.registry.is_bound) and the gate leaves it out of its speed rows.
Knobs: k.
"""

from __future__ import annotations

import torch

from methods import sizing
from methods.base import Method, Proposal


class Oracle(Method):
    name = "oracle"
    bound = True  # its drafts cost nothing and its answer is decoded untimed: not a method

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.policy = sizing.chain(self)
        self.k = self.policy.max_k

    @torch.inference_mode()
    def start(self, state) -> None:
        """The target's greedy continuation of the prompt (untimed: before the clock starts)."""
        eos = self.ctx.eos
        cache = self.target.new_cache(state.n_prompt + state.max_new + 1)
        logits = self.target.forward(state.tokens[None], cache, logits_to_keep=1).logits[0, -1]
        out = []
        for _ in range(state.max_new):
            x = int(logits.argmax())
            out.append(x)
            if x in eos:
                break
            nxt = torch.tensor([[x]], device=state.ids.device)
            logits = self.target.forward(nxt, cache, logits_to_keep=1).logits[0, -1]
        state.aux["answer"] = torch.tensor(out, dtype=torch.long, device=state.ids.device)

    def draft(self, state) -> Proposal:
        answer, pos = state.aux["answer"], state.length - state.n_prompt
        if not torch.equal(state.ids[state.n_prompt : state.length], answer[:pos]):
            return Proposal(tokens=answer.new_empty(0))  # left the known answer: no more drafts
        tokens = answer[pos : pos + self.k]
        return Proposal(tokens=tokens[: self.policy.length(cap=tokens.numel())])
