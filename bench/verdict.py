"""Greedy losslessness, per prompt and turn: equal ids, a near-tie, or a mismatch.

At temperature 0 a lossless method emits exactly the baseline's tokens. When it does not, the
first divergence position j is recorded with the baseline's logits there (one target forward
over the baseline's prefix, outside the clock): `logit_gap` = top-1 − top-2 and `method_gap` =
logit(baseline token) − logit(method token). A divergence with method_gap ≤ tie_tolerance is a
numerical near-tie (multi-token and one-token forwards round differently, notably in bf16);
anything larger is a bug in the method.
"""
from __future__ import annotations

import torch

from bench import kvcache


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@torch.inference_mode()
def compare(target, prompt_ids: list[int], base_out: list[int], method_out: list[int],
            tie_tolerance: float, device) -> dict:
    j = first_divergence(base_out, method_out)
    if j is None:
        return {"verdict": "exact", "first_divergence": None, "logit_gap": None, "method_gap": None}
    prefix = torch.tensor([prompt_ids + base_out[:j]], device=device)
    logits = kvcache.forward(target, prefix, kvcache.new_cache(), logits_to_keep=1).logits[0, -1]
    logits = logits.float()
    top2 = torch.topk(logits, 2).values
    gap = float(top2[0] - top2[1])
    method_gap = None
    if j < len(base_out) and j < len(method_out):
        method_gap = float(logits[base_out[j]] - logits[method_out[j]])
    near = method_gap is not None and abs(method_gap) <= tie_tolerance
    return {"verdict": "near-tie" if near else "mismatch", "first_divergence": j,
            "logit_gap": gap, "method_gap": method_gap}
