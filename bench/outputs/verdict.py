"""Greedy losslessness, per prompt and turn: equal ids, a near-tie, or a mismatch.

At temperature 0 a lossless method emits exactly the baseline's tokens. When it does not, the
first divergence position j is recorded with the baseline's logits there (one target forward
over the baseline's prefix, outside the clock): `logit_gap` = top-1 − top-2 and `method_gap` =
logit(baseline token) − logit(method token). A divergence with method_gap ≤ tie_tolerance is a
numerical near-tie (multi-token and one-token forwards round differently, notably in bf16);
anything larger is a bug in the method. The tolerance is dtype-aware: never below two rounding
steps of the target's logit dtype at the size of its top logit (bf16 at |logit| ≈ 20: 0.25),
since one rounding step is all a different reduction order can move a logit.
A later turn whose prompt already differs (an earlier turn diverged) is not compared:
`after-divergence`.
"""

from __future__ import annotations

import math

import torch


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def rounding_step(logits: torch.Tensor) -> float:
    """The spacing of representable values of the logits' dtype at the top logit's size."""
    if not logits.is_floating_point():
        return 0.0
    top = float(logits.float().abs().max())
    if top == 0:
        return 0.0
    return torch.finfo(logits.dtype).eps * 2.0 ** math.floor(math.log2(top))


@torch.inference_mode()
def compare(
    target,
    prompt_ids: list[int],
    base_out: list[int],
    method_out: list[int],
    tie_tolerance: float,
    device,
) -> dict:
    j = first_divergence(base_out, method_out)
    if j is None:
        return {"verdict": "exact", "first_divergence": None, "logit_gap": None, "method_gap": None}
    prefix = torch.tensor([prompt_ids + base_out[:j]], device=device)
    out = target.forward(prefix, target.new_cache(prefix.shape[1]), logits_to_keep=1)
    logits = out.logits[0, -1]
    step = rounding_step(logits)
    logits = logits.float()
    top2 = torch.topk(logits, 2).values
    gap = float(top2[0] - top2[1])
    method_gap = None
    if j < len(base_out) and j < len(method_out):
        method_gap = float(logits[base_out[j]] - logits[method_out[j]])
    near = method_gap is not None and abs(method_gap) <= max(tie_tolerance, 2 * step)
    return {
        "verdict": "near-tie" if near else "mismatch",
        "first_divergence": j,
        "logit_gap": gap,
        "method_gap": method_gap,
    }


AFTER_DIVERGENCE = {
    "verdict": "after-divergence",
    "first_divergence": None,
    "logit_gap": None,
    "method_gap": None,
}


def turn_verdicts(target, runs: dict, greedy: bool, tie_tolerance: float, device, pvalue=None):
    """Per repeat, per turn of one prompt → verdicts[repeat][turn]. Greedy compares each of the
    method's repeats with the baseline's repeat of the same index (a turn after a divergence has
    another prompt and is marked so); sampled turns carry the run's distribution-check p-value."""
    out = []
    for r, m_conv in enumerate(runs["method"]):
        b_conv = runs["baseline"][min(r, len(runs["baseline"]) - 1)]
        per_turn = []
        for (b_ids, b_res, *_), (m_ids, m_res, *_) in zip(b_conv, m_conv):
            if not greedy:
                per_turn.append({"verdict": None, "dist_pvalue": pvalue})
            elif m_ids != b_ids:
                per_turn.append(dict(AFTER_DIVERGENCE))
            else:
                b, m = b_res.output_ids, m_res.output_ids
                per_turn.append(compare(target, b_ids, b, m, tie_tolerance, device))
        out.append(per_turn)
    return out
