"""Repetition loops in a turn's tokens: pure functions on token ids.

A small greedy target can fall into a loop ("der Auswahl der Auswahl der Auswahl …" to the
token budget), which a lookup drafter (ngram, suffix, SAM) turns into long accepted runs: its
speedup there says little about ordinary text. Every record flags its turn (`loop`), and the
summary reports the speedup without such units (docs/metrics.md, *Loops and stop reasons*).

    looping(ids)          # True: a loop by either rule below
    repeated_ngram(ids)   # (start, n) of an n-gram (n >= 2) repeated 4 times back to back
    periodic_tail(ids)    # the period (<= 16) of a periodic last third

The rules are exact token equalities, so an enumeration ("1. … 2. … 3. …") that repeats short
n-grams with other tokens between them, or with a counter that changes, is no loop. A run of
8 identical tokens is one (an n-gram of 2 repeated 4 times), as is a digit repeated 8 times
inside a number: rare, and flagged on purpose rather than special-cased.
SpecForge's benchmarks/check_loops.py flags a 16-word phrase repeated 5 times, which cannot
fire within a 64-token budget; these rules can.
"""

from __future__ import annotations

import numpy as np

MIN_N = 2  # the shortest n-gram whose back-to-back repeats count
REPEATS = 4  # copies back to back that make a loop
MAX_PERIOD = 16  # the longest period of a periodic last third
# a last third shorter than this is judged by the n-gram rule alone: a few tokens are periodic
# by accident (a short reply ending "! !")
MIN_TAIL = 8


def looping(ids) -> bool:
    """Does this turn loop: an n-gram (n >= MIN_N) repeated REPEATS times back to back anywhere,
    or a last third periodic with a period <= MAX_PERIOD. `ids`: the turn's new tokens, a
    closing EOS left out (it would break the tail's period)."""
    return repeated_ngram(ids) is not None or periodic_tail(ids) is not None


def repeated_ngram(ids, min_n: int = MIN_N, repeats: int = REPEATS) -> tuple[int, int] | None:
    """(start, n) of the shortest n-gram, n >= min_n, that occurs `repeats` times back to back
    (its first such place), else None.

    Copies of ids[i : i+n] fill ids[i : i + repeats·n] exactly when ids[j] == ids[j+n] for
    every j in [i, i + (repeats−1)·n): a run of (repeats−1)·n equalities at lag n. O(L²/repeats)
    comparisons, vectorised per lag."""
    a = np.asarray(ids, dtype=np.int64)
    for n in range(min_n, len(a) // repeats + 1):
        same = np.concatenate(([False], a[n:] == a[:-n], [False])).astype(np.int8)
        edges = np.diff(same)
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        long = np.flatnonzero(ends - starts >= (repeats - 1) * n)
        if len(long):
            return int(starts[long[0]]), n
    return None


def periodic_tail(ids, max_period: int = MAX_PERIOD, min_tail: int = MIN_TAIL) -> int | None:
    """The smallest period p <= max_period of the turn's last third (its last len // 3 tokens:
    tail[j] == tail[j+p] for every j, and at least two periods in it), else None."""
    tail = list(ids)[len(ids) - len(ids) // 3 :]
    if len(tail) < min_tail:
        return None
    for p in range(1, min(max_period, len(tail) // 2) + 1):
        if tail[p:] == tail[:-p]:
            return p
    return None
