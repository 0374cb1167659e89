"""What an engine is: a target (or draft) model behind one forward and one cache interface.

    out = engine.forward(ids, cache, positions=None, mask=None, logits_to_keep=0, hidden=())
        ids        (B, n) long: new tokens appended after cache.length cached positions
        positions  (B, n) long; None: cache.length + 0..n-1
        mask       (B | 1, n, cache.length + n) bool, True where a row may attend; None: causal
        hidden     transformers `hidden_states` indices to return (0: embeddings, i: input of
                   layer i, N or −1: the last layer's output after the final norm)
        → out.logits (B, n | logits_to_keep, V) in the activation dtype,
          out.hidden {index as asked: (B, n, H)}

A tree is verified with `positions = cached + depth` and `mask = [all cached | ancestors]`
(`tree_mask`); a rollback is `cache.crop(n)`, keeping an accepted path `cache.keep(start, rows)`.
Every method, the baseline, the tree budget, the verdict and training-data generation call only
this interface, so each runs unchanged on `engine=hf` and `engine=lean`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Out:
    logits: torch.Tensor
    hidden: dict = field(default_factory=dict)


def tree_mask(visible: torch.Tensor, cached: int) -> torch.Tensor:
    """The one attention-mask builder: every cached position, then the new block.

    visible (n, m) bool, [i, j]: new row i sees the j-th of the last m keys (a tree's ancestor
    matrix, m = n; a drafter's tree cache and its new rows, m ≥ n) → (1, n, cached + m) bool.
    """
    n = visible.shape[0]
    seen = torch.ones(n, cached, dtype=torch.bool, device=visible.device)
    return torch.cat([seen, visible], dim=1)[None]


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True: attend) as the additive float mask attention kernels take:
    0 where allowed, the dtype's minimum elsewhere."""
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(~mask, torch.finfo(dtype).min)


class Engine:
    """Shared attributes; `engines.hf.HFEngine` and `engines.lean.LeanEngine` implement it."""

    name = "base"
    config = None  # the model's transformers config (vocab_size, num_hidden_layers, ...)
    device: torch.device
    dtype: torch.dtype  # activation dtype
    weights: str  # weight format (engines.formats) or the checkpoint's dtype for hf

    def new_cache(self, capacity: int, batch: int = 1):
        raise NotImplementedError

    def forward(
        self, ids, cache, positions=None, mask=None, logits_to_keep: int = 0, hidden=()
    ) -> Out:
        raise NotImplementedError

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Input embeddings of ids, (..., H), in the activation dtype."""
        return torch.nn.functional.embedding(ids, self.embed_weight).to(self.dtype)

    @property
    def embed_weight(self) -> torch.Tensor:
        """(V, H) input embedding table (float)."""
        raise NotImplementedError

    def output_weight(self) -> torch.Tensor:
        """(V, H) float weight of the output layer as the engine applies it (for drafters that
        score through the target's LM head)."""
        raise NotImplementedError

    def weight_bytes(self) -> int:
        raise NotImplementedError

    def describe(self) -> dict:
        """What runs: engine, weight format, activation dtype, kernels."""
        return {
            "engine": self.name,
            "weights": self.weights,
            "dtype": str(self.dtype).removeprefix("torch."),
        }

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)
