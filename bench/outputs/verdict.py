"""Greedy losslessness, per prompt and turn: equal ids, a near-tie, or a mismatch.

At temperature 0 a lossless method emits exactly the baseline's tokens. When it does not, the
first divergence position j is recorded with the baseline's logits there (one target forward
over the baseline's prefix, outside the clock): `logit_gap` = top-1 − top-2 and `method_gap` =
logit(baseline token) − logit(method token).
- On an engine whose rows are batch invariant (engine_choice.batch_invariant: the lean engine on
  the native kernels, where a row's logits are the same bits alone or among 64 rows), a verify
  computes exactly what one-token decoding does, so ANY divergence is a mismatch: a bug (a
  stale cache row flips near-tied tokens first, so a small gap is no excuse there).
- Elsewhere (engine=hf, torch's kernels) a divergence with method_gap ≤ tie_tolerance is a
  numerical near-tie (multi-token and one-token forwards round differently, notably in bf16);
  anything larger is a bug in the method. The tolerance is dtype-aware: never below two rounding
  steps of the target's logit dtype at the size of its top logit (bf16 at |logit| ≈ 20: 0.25),
  since one rounding step is all a different reduction order can move a logit.
A later turn whose prompt already differs (an earlier turn diverged) cannot be compared as
measured. With a `redecode` (the runner's: the method run again, untimed, on the baseline's
history of that turn) it is compared on the baseline's prompt instead, so a bug in a later turn
is not hidden behind an earlier one: `redecode_verdict` holds that comparison's verdict, and
`verdict` stays `after-divergence` when it was exact (the timed turn still answered another
prompt) and becomes its near-tie or mismatch otherwise, with that comparison's gaps. Without a
`redecode` the turn is `after-divergence`, uncompared.
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
    batch_invariant: bool = False,
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
    near = (
        not batch_invariant
        and method_gap is not None
        and abs(method_gap) <= max(tie_tolerance, 2 * step)
    )
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


def later_turn(target, b_ids, b_out, redecode, tie_tolerance, device, batch_invariant) -> dict:
    """A turn after a divergence: uncompared without `redecode`; else the method's untimed
    re-decode on the baseline's prompt `b_ids` against the baseline's answer (module doc)."""
    if redecode is None:
        return dict(AFTER_DIVERGENCE, redecode_verdict=None)
    v = compare(target, b_ids, b_out, redecode(b_ids), tie_tolerance, device, batch_invariant)
    v["redecode_verdict"] = v["verdict"]
    if v["verdict"] == "exact":
        v["verdict"] = "after-divergence"
    return v


def turn_verdicts(
    target,
    runs: dict,
    greedy: bool,
    tie_tolerance: float,
    device,
    dist: dict | None = None,
    batch_invariant: bool = False,
    redecode=None,
):
    """Per repeat, per turn of one prompt → verdicts[repeat][turn]. Greedy compares each of the
    method's repeats with the baseline's repeat of the same index; a turn after a divergence has
    another prompt and goes through `later_turn` (`redecode(prompt ids) → output ids`: the
    method, untimed, on the baseline's history). Sampled turns carry check=distribution's
    fields `dist` ({dist_pvalue, dist_status}) on turn 0 of a prompt the check sampled only."""
    out = []
    for r, m_conv in enumerate(runs["method"]):
        b_conv = runs["baseline"][min(r, len(runs["baseline"]) - 1)]
        per_turn = []
        judge = dict(tie_tolerance=tie_tolerance, device=device, batch_invariant=batch_invariant)
        for t, ((b_ids, b_res, *_), (m_ids, m_res, *_)) in enumerate(zip(b_conv, m_conv)):
            b, m = b_res.output_ids, m_res.output_ids
            if not greedy:
                sampled = dist if dist is not None and t == 0 else {}
                per_turn.append({"verdict": None, **sampled})
            elif m_ids != b_ids:
                per_turn.append(later_turn(target, b_ids, b, redecode, **judge))
            else:
                per_turn.append(compare(target, b_ids, b, m, **judge))
        out.append(per_turn)
    return out
