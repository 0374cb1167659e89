"""The A/B gate's speed verdicts: pure functions from three trees' per-unit figures to rows.

In one job the recorded commit (A), the tree under test (B) and a second worker of the recorded
commit (A′) each measure every unit (prompt × turn) of every method once, in an order that
alternates unit by unit (bench/gate/ab.py), so drift over the job cancels. Two speed metrics:

    tokens_per_s   x_u = the turn's new tokens ÷ its wall seconds (end to end, prefill included)
    speedup        x_u = the method's tokens/s ÷ ar's tokens/s, same unit, same tree

Per method and metric, over the n units all three measured:

    d_u = log x_u(B) − log x_u(A)        D = mean_u d_u      the change under test
    e_u = log x_u(A′) − log x_u(A)       E = mean_u e_u      what an unchanged tree shows here,
                                                             the difference of two processes in it
    SE  = max(sd_u(e) / √n, SE_HAC(e))      e in the order the units were measured
    Ē   = median over the run's methods of their tokens/s E (same row kind); 0 for speedup
    t   = max(z · SE + |Ē|, −log(1 − tol) / 2)      z = Φ⁻¹(1 − 0.05 / tests)
    fails when D < −t

z spreads 5% of false alarms over all the run's tests (Bonferroni). SE_HAC is the Bartlett
(Newey–West) standard error of the mean with lag L = ⌈n^(1/3)⌉: a size policy that learns from
the machine's timings (k=auto) carries its state from unit to unit, so one process can sit slow
for a few units in a row (a tree drafter that stopped drafting waits longer after each probe
that fails), which independent units would understate; at a fixed k the units are independent
and the two agree. |Ē| counts a process offset (shared by every cell of a process) as noise; a
speedup, a ratio within one process, has none. Two processes' k=auto cells also differ in target
forwards (their decisions read their own timings); the row prints that spread but does not add it
to t: what a different decision costs is already in each unit's tokens/s, and a policy switches
where the choices are near equal in value (forwards 6–13% apart, tokens/s −2.4…+3.5% within one
SE: docs/gate.md). A process that still sits apart is what the confirmation's fresh trio is for
(bench/gate/confirm.py). The floor puts t halfway to tol when the noise is small;
power = Φ((−log(1 − tol) − t) / SE) is printed, below 90% the row says "underpowered".
What was measured for each choice: docs/gate.md.

`simulate` gives the rates from the run's own units: a simulated gate run draws its B-against-A
units and its A′-against-A units independently from the measured A′-against-A units (an unchanged
tree; each row's centred on Ē where there is one: the model above), in circular blocks of L + 1
units so that runs of slow units stay runs; a false alarm is any test failing, a detection is the
one method whose tokens/s (or speedup) is lowered by tol failing.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from bench.gate.rules import Row

ALPHA = 0.05  # false alarms per gate run, all methods and metrics together
METRICS = ("tokens_per_s", "speedup")


def z_for(tests: int) -> float:
    return NormalDist().inv_cdf(1 - ALPHA / max(tests, 1))


def threshold(e: np.ndarray, z: float, tol: float, shared: float | None = None):
    """(t, SE) of the rule above from the A′/A log ratios e (in measured order) and Ē (`shared`;
    None: the row's E)."""
    se = unit_se(e)
    offset = abs(float(e.mean())) if shared is None else abs(shared)
    return bound(z, se, offset, tol), se


def lag(n: int) -> int:
    """L = ⌈n^(1/3)⌉, at most n − 1: how far apart two units' noise may still be related."""
    return max(1, min(n - 1, math.ceil(n ** (1 / 3))))


def unit_se(e: np.ndarray) -> float:
    """SE of mean(e): the larger of the independent units' sd/√n and the Bartlett HAC estimate
    Σ_{|l| ≤ L} (1 − |l|/(L+1)) γ_l / n (γ_l: the autocovariance at lag l, e in measured order)."""
    n = len(e)
    iid = float(e.std(ddof=1) / math.sqrt(n))
    x = e - e.mean()
    big_l = lag(n)
    s = float(x @ x) / n
    for k in range(1, big_l + 1):
        s += 2 * (1 - k / (big_l + 1)) * float(x[k:] @ x[:-k]) / n
    return max(iid, math.sqrt(max(s, 0.0) / n))


def bound(z: float, se: float, offset: float, tol: float) -> float:
    """t = max(z·SE + offset, −log(1 − tol)/2): the floor halfway to the slowdown to catch."""
    return max(z * se + offset, -math.log(1 - tol) / 2)


def judged(d: float, t: float, p: float) -> str:
    """A speed row's verdict from its D, threshold t and power p."""
    return "REGRESSION" if d < -t else "underpowered" if p < 0.9 else "better" if d > t else "ok"


def work_offset(trees: dict[str, dict], method: str) -> tuple[float, float]:
    """log(Σ forwards at A′, at B ÷ Σ forwards at A) over the units all three ran: printed with
    the row (k=auto's decisions differ between processes), not part of its threshold."""
    t = {k: trees[k].get(method, {}) for k in ("A", "A′", "B")}
    units = t["A"].keys() & t["A′"].keys() & t["B"].keys()
    f = {k: sum(x[u].get("forwards") or 0 for u in units) for k, x in t.items()}
    if min(f.values()) <= 0:
        return 0.0, 0.0
    return math.log(f["A′"] / f["A"]), math.log(f["B"] / f["A"])


def process_offset(trees: dict[str, dict], metric: str) -> float | None:
    """Ē: the median over methods of E (A′ against A), or None below 3 methods; 0 for speedup,
    a ratio within one tree, where a process offset cancels (and every row's E carries the one
    ar cell's noise, which its SE counts already)."""
    if metric == "speedup":
        return 0.0
    x = {k: speeds(trees[k], metric) for k in ("A", "A′")}
    es = [
        log_ratios(x["A′"][m], x["A"][m], units).mean()
        for m in x["A′"]
        if m in x["A"] and len(units := noise_units(trees, m, metric)) >= 2
    ]
    return float(np.median(es)) if len(es) >= 3 else None


def power(t: float, se: float, tol: float) -> float:
    """P(D < −t) for a tree whose figure dropped by tol, D ~ N(log(1 − tol), SE²)."""
    return NormalDist().cdf((-math.log(1 - tol) - t) / se) if se > 0 else 1.0


def log_ratios(num: dict[str, float], den: dict[str, float], units: list[str]) -> np.ndarray:
    return np.array([math.log(num[u] / den[u]) for u in units])


def speeds(tree: dict[str, dict[str, dict]], metric: str) -> dict[str, dict[str, float]]:
    """{method: {unit: x_u}} of one tree's figures ({method: {unit: {"tokens_per_s"}}})."""
    tps = {m: {u: f["tokens_per_s"] for u, f in units.items()} for m, units in tree.items()}
    if metric == "tokens_per_s":
        return tps
    ar = tps.get("ar", {})
    return {
        m: {u: x / ar[u] for u, x in units.items() if u in ar}
        for m, units in tps.items()
        if m != "ar"
    }


def tests_of(trees: dict[str, dict]) -> list[tuple[str, str]]:
    """(method, metric) of every speed test the run makes: both trees measured the method."""
    out = []
    for metric in METRICS:
        both = speeds(trees["A"], metric).keys() & speeds(trees["B"], metric).keys()
        out += [(m, metric) for m in trees["B"] if m in both]
    return out


def noise_units(trees: dict[str, dict], method: str, metric: str) -> list[str]:
    """The units all three trees measured, in the order A measured them (a worker's units run in
    the order of the prompts: the order a policy's state carries through)."""
    x = {k: speeds(trees[k], metric).get(method, {}) for k in ("A", "B", "A′")}
    return [u for u in x["A"] if u in x["B"] and u in x["A′"]]


def check(trees: dict[str, dict], method: str, metric: str, tol: float, tests: int,
          shared: float | None = None) -> Row:  # fmt: skip
    """One speed row of B against A, its threshold from A′ against A (shared: Ē)."""
    x = {k: speeds(trees[k], metric)[method] for k in ("A", "B", "A′")}
    units = noise_units(trees, method, metric)
    if len(units) < 2:
        return Row(
            method, metric, None, None, f"{len(units)} common units: not compared", "REGRESSION"
        )
    a, b = (math.exp(np.mean(np.log([x[k][u] for u in units]))) for k in ("A", "B"))
    d = log_ratios(x["B"], x["A"], units).mean()
    e = log_ratios(x["A′"], x["A"], units)
    work = work_offset(trees, method)
    t, se = threshold(e, z_for(tests), tol, shared)
    p = power(t, se, tol)
    offset = f" (all: {math.exp(shared) - 1:+.1%})" if shared else ""
    if work[0]:
        offset += f", forwards A′/A {math.exp(work[0]) - 1:+.1%} B/A {math.exp(work[1]) - 1:+.1%}"
    rule = (
        f"B/A {math.exp(d) - 1:+.1%} ≥ {math.exp(-t) - 1:.1%} ({len(units)} units; A′/A "
        f"{math.exp(e.mean()) - 1:+.1%}{offset}, SE {se:.3f}; power {p:.0%} at −{tol:.0%})"
    )
    return Row(method, metric, a, b, rule, judged(d, t, p))


def machine_row(trees: dict[str, dict], tol: float, tests: int) -> Row | None:
    """Every method slower alike: the median of the M methods' tokens/s D, SE = √(π/2M)·sd(E),
    judged as a row with the offset Ē (None below 3 methods)."""
    x = {k: speeds(trees[k], "tokens_per_s") for k in ("A", "B", "A′")}
    ds, es = [], []
    for m in x["B"]:
        units = noise_units(trees, m, "tokens_per_s")
        if m in x["A"] and len(units) >= 2:
            ds.append(log_ratios(x["B"][m], x["A"][m], units).mean())
            es.append(log_ratios(x["A′"][m], x["A"][m], units).mean())
    if len(ds) < 3:
        return None
    d, shared = float(np.median(ds)), float(np.median(es))
    se = math.sqrt(math.pi / (2 * len(es))) * float(np.std(es, ddof=1))
    t = bound(z_for(tests), se, abs(shared), tol)
    p = power(t, se, tol)
    rule = (
        f"median B/A of {len(ds)} methods {math.exp(d) - 1:+.1%} ≥ {math.exp(-t) - 1:.1%} "
        f"(A′/A {math.exp(shared) - 1:+.1%}, SE {se:.3f}; power {p:.0%} at −{tol:.0%})"
    )
    return Row("all", "tokens_per_s", None, math.exp(d), rule, judged(d, t, p))


def checks(trees: dict[str, dict], tol: float, tests: int | None = None) -> list[Row]:
    """The speed row of every method both trees measured; `tests`: how many speed tests the
    whole run makes (Bonferroni), these by default."""
    mine = tests_of(trees)
    shared = {metric: process_offset(trees, metric) for metric in METRICS}
    return [check(trees, m, metric, tol, tests or len(mine), shared[metric]) for m, metric in mine]


def speed_rows(trees: dict[str, dict], tol: float) -> list[Row]:
    """Every speed row: methods A measured and B did not fail as missing; B's new ones pass."""
    rows = checks(trees, tol)
    for m in trees["A"]:
        if m not in trees["B"]:
            rows.append(Row(m, "tokens_per_s", None, None, "measured at A, not at B", "missing"))
    for m in trees["B"]:
        if m not in trees["A"]:
            rows.append(Row(m, "tokens_per_s", None, None, "not at the recorded commit", "new"))
    return rows


def simulate(
    trees: dict[str, dict], tol: float, draws: int = 1000, seed: int = 0
) -> tuple[float, dict[tuple[str, str], float]]:
    """(false-alarm rate of a whole gate run, {(method, metric): detection rate of a tol
    slowdown}) drawn from this run's own A′-against-A units (module docstring)."""
    tests = [t for t in tests_of(trees) if len(noise_units(trees, *t)) >= 2]
    if not tests:
        return float("nan"), {}
    rng = np.random.default_rng(seed)
    z, drop = z_for(len(tests)), math.log(1 - tol)
    e = {}
    offset = {metric: process_offset(trees, metric) for metric in METRICS}
    for m, metric in tests:
        x = {k: speeds(trees[k], metric)[m] for k in ("A", "A′")}
        ek = log_ratios(x["A′"], x["A"], noise_units(trees, m, metric))
        if offset[metric] is not None:  # a row's E: noise around the process offset Ē
            ek = ek - ek.mean() + offset[metric]
        e[m, metric] = ek
    alarms, caught = 0, dict.fromkeys(tests, 0)
    for _ in range(draws):
        alarm = False
        now = {key: blocks(ek, rng) for key, ek in e.items()}
        shared = {
            metric: (float(np.median(x)) if len(x := [v.mean() for (_, mt), v in now.items()
                                                       if mt == metric]) >= 3 else None)
            for metric in METRICS
        }  # fmt: skip
        for key, ek in e.items():
            d = blocks(ek, rng).mean()
            t, _ = threshold(now[key], z, tol, shared[key[1]])
            alarm |= d < -t
            caught[key] += d + drop < -t
        alarms += alarm
    return alarms / draws, {k: v / draws for k, v in caught.items()}


def blocks(e: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A circular block bootstrap draw of e: blocks of L + 1 consecutive units from random starts
    (wrapping around), cut to len(e)."""
    n = len(e)
    size = min(n, lag(n) + 1)
    starts = rng.integers(n, size=-(-n // size))
    return np.concatenate([e[(s + np.arange(size)) % n] for s in starts])[:n]
