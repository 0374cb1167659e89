"""How often the speedup rule (bench.gate.rules) fails a run, simulated from recorded noise.

A baseline is recorded with R ≥ 2 repeats per unit. The difference of a unit's two log pair
ratios, ÷ √2, is one draw of a single run's noise on that unit; pooled (with both signs) over the
units they give the method's own run-to-run noise, and the `ar` cell's give the noise the rule
measures. One simulated gate run:

    D      = mean_u (e_now,u − ē_base,u) + log(1 − slowdown)      e ~ the method's pool,
                                                                  ē_base a mean of R draws
    s_now  = sd of n draws from the ar pool (the new run's own AR-against-AR cell)
    fails  = rules.fails_speedup(D, n, s_now, s_base, tol)        s_base: the recorded ar cell's
                                                                  (each raised to the method's
                                                                  own noise, rules.method_noise)

    (with the machine-wide part taken out, rules.common_part over M methods: D also carries
    the median's noise, N(0, (widen² − 1)·var D), and the threshold's SE is widened alike)

so `rate(slowdown=0.15)` is the detection rate of a 15% drop in end-to-end tokens/s and
`rate(slowdown=0)` the false-alarm rate of an unchanged tree; neither depends on the load of the
machine the simulation runs on.
"""

from __future__ import annotations

import math

import numpy as np

from bench.gate.rules import fails_speedup, median_widening, method_noise, noise_sd, repeat_noise


def noise_pool(units: dict[str, dict]) -> np.ndarray:
    """Single-run noise draws on a unit's log pair ratio, from its recorded repeats."""
    d = repeat_noise(units)
    if not len(d):
        raise ValueError("no unit has two recorded repeats: record the baseline with repeats ≥ 2")
    return d


def rate(
    method_units: dict[str, dict],
    ar_units: dict[str, dict],
    tol: float,
    slowdown: float,
    draws: int = 1000,
    seed: int = 0,
    methods: int = 0,
) -> float:
    """Share of `draws` simulated runs that the rule fails (see the module docstring)."""
    rng = np.random.default_rng(seed)
    pool, ar_pool = noise_pool(method_units), noise_pool(ar_units)
    n = len(method_units)
    repeats = min(len(u["repeats"]) for u in method_units.values())
    s_base = noise_sd(ar_units)
    e_now = rng.choice(pool, size=(draws, n))
    e_base = rng.choice(pool, size=(draws, repeats, n)).mean(axis=1)
    d = (e_now - e_base).mean(axis=1)
    widen = median_widening(methods)
    d = d + rng.normal(0, d.std() * math.sqrt(widen**2 - 1), draws) + math.log(1 - slowdown)
    s_now = rng.choice(ar_pool, size=(draws, n)).std(axis=1, ddof=1)
    noise = [method_noise((s, s_base), method_units) for s in s_now]
    return float(np.mean([fails_speedup(d[i], n, *noise[i], tol, widen) for i in range(draws)]))


def methods_of(entry: dict) -> int:
    """M of the machine-wide part for a baseline entry (rules.common_part: 0 below 3)."""
    m = sum(1 for name in entry["methods"] if name != "ar")
    return m if m >= 3 else 0
