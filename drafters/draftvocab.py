"""A frequency-ranked draft vocabulary for heads that share the target's full output layer.

Medusa and EAGLE-1/2 heads score their candidates through the target's LM head (V × H). On a CPU
that matrix product dominates drafting (V = 49,152, H = 576: ~113 MB of float32 read per
drafting step, more than the rest of the head). Scoring only the N most frequent answer tokens
of the training data (FR-Spec's idea; EAGLE-3 bakes the same choice into its own head) cuts
that cost by V / N. It changes which tokens are drafted, never what is accepted: candidates are
verified by the target as point masses, so the output stays exactly the target's.
"""

from __future__ import annotations

import torch

from drafters.weights import to_linear


def inverse(ids: torch.Tensor | None, vocab: int) -> torch.Tensor:
    """t2d: target id → position in `ids` (−1 outside); `ids` None means every id."""
    if ids is None:
        return torch.arange(vocab)
    t2d = torch.full((vocab,), -1, dtype=torch.long)
    t2d[ids.cpu()] = torch.arange(ids.numel())
    return t2d


class DraftVocab:
    def __init__(self, weight: torch.Tensor, frequent: list[int] | None, size: int | None):
        """weight (V, H): the target's output layer; frequent: ids by decreasing frequency."""
        if not size or not frequent or size >= weight.shape[0]:
            self.ids, self.weight = None, weight
        else:
            self.ids = torch.tensor(sorted(frequent[:size]), dtype=torch.long, device=weight.device)
            self.weight = weight.detach()[self.ids].contiguous()
        self.linear = None  # int8 rows on the native kernels (quantize)

    def quantize(self) -> None:
        """Score through an int8 copy of the rows (drafters.weights); the full vocabulary is the
        target's own layer and stays as the target runs it."""
        if self.ids is not None:
            self.linear, self.weight = to_linear(self.weight), None  # the float copy freed

    @property
    def size(self) -> int:
        return self.linear.out_features if self.linear is not None else self.weight.shape[0]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.linear is not None:
            return self.linear(x)
        return x @ self.weight.T.to(x.dtype)

    def to_target(self, idx: torch.Tensor) -> torch.Tensor:
        return idx if self.ids is None else self.ids[idx]

    def extra_bytes(self) -> int:
        if self.ids is None:
            return 0  # the target's own weights
        if self.linear is not None:
            return self.linear.nbytes() + self.ids.numel() * 8
        return self.weight.numel() * self.weight.element_size() + self.ids.numel() * 8
