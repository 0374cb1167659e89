"""How many tree nodes to verify per round, from timed target forwards on this device.

A verify forward over n new tokens costs c(n). On a 2-core CPU c grows steeply with n (float32
SmolLM2-135M: 58 ms at 1 token, ~90 at 16); on a GPU it is flat up to dozens of tokens. The
automatic budget times c(n) for n in `SIZES` (median of `repeats` after one warm-up, after a
`context`-token prefill, with the one clock of bench.clock) and picks the largest n with
c(n) ≤ ratio · c(1): a round may cost at most `ratio` times a plain decoding step. The result
(the curve and the choice) is reported with the run.
"""
from __future__ import annotations

import statistics
import weakref

import torch

from bench import kvcache
from bench.clock import Clock

SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model → {key: costs}


@torch.inference_mode()
def verify_costs(model, device, sizes=SIZES, context: int = 128, repeats: int = 3) -> dict:
    """{n: median seconds of one forward over n new tokens after `context` cached tokens}."""
    vocab = model.config.vocab_size
    ctx_ids = (torch.arange(context, device=device) * 7919 % vocab)[None]
    clock = Clock(torch.device(device))
    out = {}
    for n in sizes:
        times = []
        for r in range(repeats + 1):
            cache = kvcache.new_cache()
            kvcache.forward(model, ctx_ids, cache, logits_to_keep=1)
            new = (torch.arange(n, device=device) * 31 % vocab)[None]
            clock.reset()
            with clock.phase("verify"):
                kvcache.forward(model, new, cache)
            if r:  # the first repeat warms up
                times.append(clock.read()["verify"] / 1e9)
        out[n] = statistics.median(times)
    return out


def choose(costs: dict, ratio: float) -> int:
    """The largest n with costs[n] ≤ ratio · costs[1] (at least 1)."""
    base = costs[min(costs)]
    ok = [n for n, c in costs.items() if c <= ratio * base]
    return max(ok) if ok else min(costs)


def auto_tokens(model, device, ratio: float) -> tuple[int, dict]:
    """(tokens per verify forward, the timed curve); measured once per model and device."""
    per_model = _CACHE.setdefault(model, {})
    key = (str(device), next(model.parameters()).dtype)
    if key not in per_model:
        per_model[key] = verify_costs(model, device)
    costs = per_model[key]
    return choose(costs, ratio), costs
