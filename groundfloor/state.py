"""The explicit per-turn decoding state shared by the loop and a method's round.

Invariant between rounds: `ids[:length]` are the committed tokens (prompt + output so far) and the
target cache holds K/V for `ids[:length - 1]`; the last committed token is still to be fed,
together with the next draft, in the next verify forward. Method-private state (a draft model's
cache, hidden states) lives in `aux`, never on a model object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from groundfloor.devices import host_tensor
from groundfloor.sampling import SamplingParams


@dataclass
class DecodeState:
    ids: torch.Tensor  # (capacity,) long, on the model's device
    length: int  # committed tokens in ids
    n_prompt: int
    cache: object  # the target engine's KV cache (engines.cache: length, crop, keep)
    sampling: SamplingParams
    generator: torch.Generator | None
    max_new: int = 0  # the turn's token budget (the loop enforces it)
    aux: dict = field(default_factory=dict)

    @property
    def tokens(self) -> torch.Tensor:
        return self.ids[: self.length]

    @property
    def last(self) -> torch.Tensor:
        return self.ids[self.length - 1 : self.length]

    def append(self, tokens: list[int]) -> None:
        n = len(tokens)
        if self.length + n > self.ids.numel():  # a drafter proposed past the budget: grow
            grown = torch.empty(self.length + n + 64, dtype=self.ids.dtype, device=self.ids.device)
            grown[: self.length] = self.ids[: self.length]
            self.ids = grown
        new = host_tensor(tokens, self.ids.dtype, self.ids.device)
        self.ids[self.length : self.length + n] = new
        self.length += n

    @classmethod
    def start(
        cls,
        prompt_ids: list[int],
        capacity: int,
        device,
        sampling: SamplingParams,
        generator,
        cache,
    ) -> "DecodeState":
        ids = torch.empty(max(capacity, len(prompt_ids) + 1), dtype=torch.long, device=device)
        ids[: len(prompt_ids)] = host_tensor(prompt_ids, torch.long, ids.device)
        return cls(
            ids=ids,
            length=len(prompt_ids),
            n_prompt=len(prompt_ids),
            cache=cache,
            sampling=sampling,
            generator=generator,
        )
