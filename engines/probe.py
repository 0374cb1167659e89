"""Timed probes of an engine on the machine at hand: the cost curve c(q) and kernel choices.

c(q) is the time of one forward over q new tokens after `context` cached tokens (median of
`repeats` after a warm-up), timed with groundfloor.clock's one clock. c(q)/c(1) is what a verify of
q − 1 drafted tokens costs relative to plain decoding: the number that decides whether a draft
of a given size can pay. Results are cached per engine object, so a run times it once.
"""

from __future__ import annotations

import statistics
import time
import weakref

import torch

from groundfloor.clock import Clock

SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
_CURVES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@torch.inference_mode()
def step_costs(engine, sizes=SIZES, context: int = 128, repeats: int = 3) -> dict:
    """{q: median seconds of one forward over q new tokens after `context` cached tokens}.
    The sizes are timed round-robin, one forward of each per repeat after one untimed round,
    so that a slow moment of the machine lands on every size alike rather than on one."""
    engine = unshared(engine)
    vocab = engine.vocab_size
    dev = engine.device
    ctx_ids = (torch.arange(context, device=dev) * 7919 % vocab)[None]
    clock = Clock(torch.device(dev))
    cache = engine.new_cache(context + max(sizes))
    engine.forward(ctx_ids, cache, logits_to_keep=1)  # one prefill; each forward is cropped away
    new = {q: (torch.arange(q, device=dev) * 31 % vocab)[None] for q in sizes}
    times: dict = {q: [] for q in sizes}
    for r in range(repeats + 1):
        for q in sizes:
            cache.crop(context)
            clock.reset()
            with clock.phase("verify"):
                engine.forward(new[q], cache)
            if r:  # the first round warms up
                times[q].append(clock.read()["verify"] / 1e9)
    return {q: statistics.median(t) for q, t in times.items()}


def curve(engine, sizes=SIZES, warm: bool = False, context: int = 128, repeats: int = 3) -> dict:
    """The engine's cost curve after `context` cached tokens, timed once per engine object and
    context. `warm`: the caller has warmed the engine up (a run, after its warm-up
    generations); a curve timed before that (a method's automatic budget at construction) is
    timed again, once, and kept for later callers."""
    per = _CURVES.setdefault(unshared(engine), {})
    key = (tuple(sizes), context)
    if key not in per or (warm and not per[key][1]):
        per[key] = (step_costs(engine, sizes, context, repeats), warm)
    return per[key][0]


def unshared(engine):
    """A batch slot's seat (engines.shared.Seat) → its engine, whose forwards a probe times
    (a seat's own would wait for a shared round); any engine → itself."""
    return getattr(engine, "unshared", engine)


def timed(engine, sizes=SIZES) -> dict | None:
    """A curve `curve` has timed for this engine over these sizes (warm or not, a warm one
    first, at any context), or None: no timing here."""
    got = [v for (s, _), v in _CURVES.get(unshared(engine), {}).items() if s == tuple(sizes)]
    got.sort(key=lambda v: not v[1])
    return got[0][0] if got else None


def anchored(costs: dict, step: float | None) -> dict:
    """The curve with its level set by the run's own plain step: scaled by step ÷ c(1) when the
    baseline's measured seconds per decoded token (which contain a c(1) and the loop around
    it) came out below c(1), i.e. the curve's few repeats per size were timed in a slower
    moment than the turns; its shape c(q)/c(1) is kept. Unchanged otherwise."""
    c1 = costs[min(costs)] if costs else 0.0
    if not step or step >= c1:
        return dict(costs)
    return {q: c * step / c1 for q, c in costs.items()}


def interpolate(costs: dict, w: float) -> float:
    """c(w) for any width w: linear between the timed sizes, proportional past the last."""
    qs = sorted(costs)
    if w <= qs[0]:
        return costs[qs[0]]
    for a, b in zip(qs, qs[1:]):
        if w <= b:
            return costs[a] + (costs[b] - costs[a]) * (w - a) / (b - a)
    return costs[qs[-1]] * w / qs[-1]  # past the curve: proportional to the width


def in_batch(costs: dict, batch: int) -> dict:
    """The curve one sequence prices its rounds with among batch − 1 others that each verify a
    row (k=auto at batch=B): its share of a plain round, T(B)/B, plus what its q − 1 extra rows
    add to the shared forward, T(B + q − 1) − T(B). With it a draft pays exactly when it raises
    the whole batch's tokens per second (this sequence drafting, the others plain): E·T(B)/B
    > T(B + n) − T(B) + its drafting time. Past the sizes where a forward is bound by reading
    the weights, extra rows cost the batch more, so fewer are drafted."""
    if batch <= 1:
        return dict(costs)
    return {q: shared_round(costs, batch, batch - 1, q) for q in costs}


def shared_round(costs: dict, batch: int, others: float, q: float) -> float:
    """Seconds one sequence's round of q rows costs on a forward of `batch` sequences whose
    others put `others` rows in it: its share T(batch)/batch of a plain round, plus what its
    q − 1 extra rows add, T(others + q) − T(others + 1)."""
    share = interpolate(costs, batch) / batch
    return share + interpolate(costs, others + q) - interpolate(costs, others + 1)


class BatchCurve(dict):
    """k=auto's curve for one sequence among `batch` (batch=B): as a dict, in_batch's (every
    other sequence plain); `verify(q)` prices its q rows on the round's forward as it stands
    when it drafts: `others()` counts the rows the other sequences put in it (those already
    asked for, one for each still drafting: engines.shared.Seat.others_rows), so a sequence
    drafting after others that drafted much pays what its rows add on top of theirs. The
    sequences decide one after another, each seeing the choices before it: a greedy joint
    choice of the round's draft lengths."""

    def __init__(self, costs: dict, batch: int, others=None):
        super().__init__(in_batch(costs, batch))
        self.raw, self.batch, self.others = dict(costs), int(batch), others

    def verify(self, q: float) -> float:
        """Seconds of a round verifying q rows of this sequence (shared_round), on top of the
        rows the others have put in the forward so far."""
        base = self.others() if self.others is not None else self.batch - 1
        return shared_round(self.raw, self.batch, base, q)


def ratios(costs: dict) -> dict:
    base = costs[min(costs)]
    return {q: c / base for q, c in costs.items()}


def read_bandwidth(device: torch.device, mb: int = 1024, reps: int = 5) -> float:
    """Bytes/s of a streaming read (a sum over a buffer far larger than the caches)."""
    x = torch.ones(mb * 2**20 // 4, dtype=torch.float32, device=device)
    x.sum()
    best = float("inf")
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        x.sum()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return x.numel() * 4 / best


@torch.inference_mode()
def time_linear(make, shapes, rows=(1, 8), repeats: int = 5) -> float:
    """Σ over `shapes` (out, in) and `rows` of the median time of a Linear built by make(w)."""
    total = 0.0
    for o, i in shapes:
        lin = make(torch.randn(o, i) * 0.02)
        for m in rows:
            x = torch.randn(m, i)
            lin(x)
            ts = []
            for _ in range(repeats):
                t = time.perf_counter()
                lin(x)
                ts.append(time.perf_counter() - t)
            total += statistics.median(ts)
    return total
