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
    SE  = sd_u(e) / √n
    Ē   = median over the run's methods of their tokens/s E (same row kind); 0 for speedup
    t   = max(z · SE + |Ē|, −log(1 − tol) / 2)      z = Φ⁻¹(1 − 0.05 / tests)
          (|Ē| → max(|Ē|, W), W = max |log(Σ forwards at A′, at B ÷ Σ forwards at A)|
           where A′ and A differ in forwards: k=auto, work_offset)
    fails when D < −t

z spreads 5% of false alarms over all the run's tests (Bonferroni). |Ē| counts a process offset
(shared by every cell of a process) as noise; a speedup, a ratio within one process, has none. W
counts a cell's own work offset (k=auto decides from each process's timings), free of timing noise;
a B that changes a fixed-k cell's forwards is a change (W = 0). The floor puts t halfway to tol when
the noise is small; power = Φ((−log(1 − tol) − t) / SE) is printed, below 90% the row says
"underpowered". What was measured for each choice: docs/gate.md.

`simulate` gives the rates from the run's own units: a simulated gate run draws its B-against-A
units and its A′-against-A units independently, with replacement, from the measured A′-against-A
units (an unchanged tree; each row's centred on Ē where there is one: the model above); a false
alarm is any test failing, a detection is the one method whose tokens/s (or speedup) is lowered by
tol failing.
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


def threshold(e: np.ndarray, z: float, tol: float, shared: float | None = None,
              work: float = 0.0):  # fmt: skip
    """(t, SE) of the rule above from the A′/A log ratios e, Ē (`shared`; None: the row's E), W."""
    se = float(e.std(ddof=1) / math.sqrt(len(e)))
    offset = abs(float(e.mean())) if shared is None else abs(shared)
    return bound(z, se, max(offset, abs(work)), tol), se


def bound(z: float, se: float, offset: float, tol: float) -> float:
    """t = max(z·SE + offset, −log(1 − tol)/2): the floor halfway to the slowdown to catch."""
    return max(z * se + offset, -math.log(1 - tol) / 2)


def judged(d: float, t: float, p: float) -> str:
    """A speed row's verdict from its D, threshold t and power p."""
    return "REGRESSION" if d < -t else "underpowered" if p < 0.9 else "better" if d > t else "ok"


def work_offset(trees: dict[str, dict], method: str) -> tuple[float, float]:
    """(W′, W_B) = log(Σ forwards at A′, at B ÷ Σ forwards at A) over the units all three ran."""
    t = {k: trees[k].get(method, {}) for k in ("A", "A′", "B")}
    units = t["A"].keys() & t["A′"].keys() & t["B"].keys()
    f = {k: sum(x[u].get("forwards") or 0 for u in units) for k, x in t.items()}
    if min(f.values()) <= 0:
        return 0.0, 0.0
    return math.log(f["A′"] / f["A"]), math.log(f["B"] / f["A"])


def work_noise(work: tuple[float, float]) -> float:
    """W of the rule: max(|W′|, |W_B|) where W′ ≠ 0, else 0 (B's own difference: a change)."""
    return max(abs(work[0]), abs(work[1])) if work[0] else 0.0


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
    x = {k: speeds(trees[k], metric).get(method, {}) for k in ("A", "B", "A′")}
    return sorted(x["A"].keys() & x["B"].keys() & x["A′"].keys())


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
    t, se = threshold(e, z_for(tests), tol, shared, work_noise(work))
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
    work = {m: work_noise(work_offset(trees, m)) for m, _ in tests}
    for m, metric in tests:
        x = {k: speeds(trees[k], metric)[m] for k in ("A", "A′")}
        ek = log_ratios(x["A′"], x["A"], noise_units(trees, m, metric))
        if offset[metric] is not None:  # a row's E: noise around the process offset Ē
            ek = ek - ek.mean() + offset[metric]
        e[m, metric] = ek
    alarms, caught = 0, dict.fromkeys(tests, 0)
    for _ in range(draws):
        alarm = False
        now = {key: ek[rng.integers(len(ek), size=len(ek))] for key, ek in e.items()}
        shared = {
            metric: (float(np.median(x)) if len(x := [v.mean() for (_, mt), v in now.items()
                                                       if mt == metric]) >= 3 else None)
            for metric in METRICS
        }  # fmt: skip
        for key, ek in e.items():
            n = len(ek)
            d = ek[rng.integers(n, size=n)].mean()
            t, _ = threshold(now[key], z, tol, shared[key[1]], work[key[0]])
            alarm |= d < -t
            caught[key] += d + drop < -t
        alarms += alarm
    return alarms / draws, {k: v / draws for k, v in caught.items()}
