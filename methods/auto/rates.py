"""k=auto's acceptance rates: per-depth conditional acceptance kept per context bucket, fading
by DECAY a round and shrunk towards the pooled rate and a prior; a learned drafter's calibration
by confidence; the probes that keep a plain-stepping run measured."""

from __future__ import annotations

import json
from pathlib import Path

PRIOR = 0.5  # conditional acceptance per depth before a run has rounds (a drafter may pass its own)
PROBE_EVERY = 8  # plain rounds in a row after which one round drafts again (keeps α measured)
PROBE_MAX = 32  # the longest wait between probes (a probe that leaves speculation off doubles it)
DECAY = 0.98  # per recorded round: counts fade over ~50 rounds, so rates follow the text at hand
PRIOR_WEIGHT = 2.0  # pseudo-rounds behind the prior (and behind the pooled rate, for a bucket)
BINS = 10  # confidence bins of a learned drafter's calibration


def fade(counts: list[float]) -> None:
    """Age running counts by one round (DECAY), in place."""
    for i in range(len(counts)):
        counts[i] *= DECAY


def trained_prior(directory) -> list[float] | float:
    """A trained drafter's held-out top-1 by position (train_summary.json, written by our
    training) as the prior of its acceptance by depth; PRIOR where it has none."""
    path = Path(directory) / "train_summary.json"
    try:
        top1 = json.loads(path.read_text()).get("top1_per_pos")
    except (OSError, ValueError):
        return PRIOR
    return [float(a) for a in top1] if top1 else PRIOR


def depths_of(parents: list[int]) -> list[int]:
    """Each node's depth (1: a child of the root), parents listed before their children."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


def per_depth(prior: list[float] | float, n: int) -> list[float]:
    """A prior (one rate, or one per depth) as the rates of depths 1..n: its last repeated past
    the depths it has, each kept within 0.01-0.99."""
    p = list(prior) if isinstance(prior, (list, tuple)) else [prior]
    return [min(max(float(p[min(i, len(p) - 1)]), 0.01), 0.99) for i in range(n)]


class Depths:
    """Conditional acceptance by depth, per bucket: counts of rounds that reached depth i with a
    drafted token there, and of those that accepted it."""

    def __init__(self, max_k: int, prior: list[float] | float = 0.5):
        self.max_k = max_k
        self.prior = per_depth(prior, max_k)
        self.pool = ([0.0] * max_k, [0.0] * max_k)  # (reached, accepted)
        self.buckets: dict = {}

    def record(self, bucket, drafted: int, accepted: int) -> None:
        rows = [self.pool]
        if bucket is not None:
            rows.append(self.buckets.setdefault(bucket, ([0.0] * self.max_k, [0.0] * self.max_k)))
        for reached, acc in rows:
            fade(reached)
            fade(acc)
            for i in range(min(accepted + 1, drafted, self.max_k)):
                reached[i] += 1
                if i < accepted:
                    acc[i] += 1

    def alphas(self, bucket=None) -> list[float]:
        w = PRIOR_WEIGHT
        reached, acc = self.pool
        pooled = [(acc[i] + w * self.prior[i]) / (reached[i] + w) for i in range(self.max_k)]
        if bucket is None or bucket not in self.buckets:
            return pooled
        reached, acc = self.buckets[bucket]
        return [(acc[i] + w * pooled[i]) / (reached[i] + w) for i in range(self.max_k)]


class Confidence:
    """P(a drafted token is accepted | its depth was reached, the drafter's top probability),
    by probability bin; prior: the running rate at the token's depth."""

    def __init__(self):
        self.reached = [0.0] * BINS
        self.acc = [0.0] * BINS

    @staticmethod
    def _bin(p: float) -> int:
        return min(int(p * BINS), BINS - 1)

    def rate(self, p: float, prior: float) -> float:
        b = self._bin(p)
        return (self.acc[b] + PRIOR_WEIGHT * prior) / (self.reached[b] + PRIOR_WEIGHT)

    def record(self, confs: list[float], accepted: int) -> None:
        fade(self.reached)
        fade(self.acc)
        for i, p in enumerate(confs[: accepted + 1]):
            b = self._bin(p)
            self.reached[b] += 1
            if i < accepted:
                self.acc[b] += 1


class Probes:
    """When a run of plain rounds drafts once more: after `wait` plain rounds in a row, `wait`
    starting at PROBE_EVERY and doubling (up to PROBE_MAX) with every probe that leaves
    speculation off, back to PROBE_EVERY once a round drafts on its merits."""

    def __init__(self):
        self.wait, self.run = PROBE_EVERY, 0

    def due(self) -> bool:
        """This round would be plain: is it time to probe instead? (A probe doubles the wait.)"""
        if self.run < self.wait:
            return False
        self.wait = min(2 * self.wait, PROBE_MAX)
        return True

    def drafted(self, merit: bool) -> None:
        """A round drafted: on its merits (the wait resets) or as a probe."""
        self.run = 0
        if merit:
            self.wait = PROBE_EVERY

    def plain(self) -> None:
        self.run += 1
