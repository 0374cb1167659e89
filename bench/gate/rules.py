"""The regression gate's verdicts: pure functions from (baseline units, units now, noise) to rows.

Per method, on the units (prompt × turn) both runs measured:
    tokens       deterministic at T = 0: every unit's output ids equal the committed outputs.
                 On a CPU kind the baseline was not recorded on, a unit whose reference stream
                 (the AR side of this run) differs from the committed one is left out, and said so.
    exact_match  this run's own greedy check (method against its interleaved AR): any drop fails
    tau          Σ new tokens ÷ Σ target forwards over the compared units: fails below
                 baseline × (1 − tau_tol); deterministic when the outputs are.
    speedup      the mean over units of the paired change in log pair ratio,
                     D = mean_u [log r_u(now) − log r_u(baseline)],
                 fails when D < −t. The noise of D comes from the `ar` cell of each run (AR
                 against AR: per-unit log ratios whose spread is pure measurement noise):
                     SE = √((s_now² + s_baseline²) / n)
                     t  = max(z_0.95 · SE, |log(1 − speedup_tol)| / 2)
                 i.e. at most 5% false alarms at the measured noise, and the threshold halfway to
                 the regression the gate must catch (speedup_tol) when the noise is small enough
                 for both. power = P(D < −t | a slowdown of speedup_tol) is printed; below 90%
                 the row says "underpowered" instead of passing silently. Only compared against a
                 baseline of the same CPU kind (engines.cpu.cpu_kind); elsewhere reported.
    machine-wide the part of D that every method shares. The same CPU kind at another hour (a
                 shared host's load moves compute-bound verification and bandwidth-bound decoding
                 differently) shifts every method's D alike: 5-8% between the recording and a CI
                 run an hour later on one Xeon, oracle included, whose speedup is a pure function
                 of the verify cost. With ≥ 3 methods besides ar the common part is
                     C = median_m D_m,
                 and each method is judged on its own part D_m − C by the rule above (its SE
                 widened by the median's, √(1 + π / 2M) for M methods), so one method's drop is
                 caught whatever the hour; C itself, every method's speedup dropping at once
                 (the shared verify path, drafting slower against ar), fails below
                 log(1 − common_tol), the drop a session-to-session drift does not reach, and is
                 printed as its own row. Being a median of speedups (ratios to each run's own
                 ar), C cannot see an engine or machine that is slower for ar and every method
                 alike; that is the next row's:
    tokens/s     machine-wide, the median over every method (ar included) of the change of its
                 cell's overall tokens/s, fails below log(1 − machine_tps_tol) (−15%).
A method in the baseline that did not run now fails ("missing"); a method that ran but has no
baseline yet passes as "new" (record it with --update). Rises are reported, never failed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

Z95 = NormalDist().inv_cdf(0.95)


@dataclass(frozen=True)
class Tolerances:
    tau_tol: float = 0.02  # relative drop of τ allowed
    exact_match_tol: float = 0.0  # absolute drop of exact_match allowed
    speedup_tol: float = 0.15  # the end-to-end slowdown the gate must catch
    common_tol: float = 0.10  # a slowdown of every method alike (the machine-wide part) that fails
    machine_tps_tol: float = 0.15  # --quick: every method's tokens/s (ar's too) dropping alike

    @classmethod
    def from_dict(cls, d: dict) -> "Tolerances":
        known = cls.__dataclass_fields__
        return cls(**{k: float(v) for k, v in d.items() if k in known})


@dataclass
class Row:
    method: str
    metric: str
    baseline: float | None
    now: float | None
    rule: str
    verdict: str  # ok | better | REGRESSION | FAIL | missing | new | underpowered | unconfirmed
    # | not gated

    @property
    def failed(self) -> bool:
        return self.verdict in ("REGRESSION", "FAIL", "missing")

    @property
    def change(self) -> float | None:
        if _missing(self.baseline) or _missing(self.now):
            return None
        if self.metric in ("exact_match", "tokens"):
            return self.now - self.baseline  # absolute: a fraction of units
        return (self.now - self.baseline) / self.baseline if self.baseline else None


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


# --- the speedup rule --------------------------------------------------------------------------
def noise_sd(ar_units: dict[str, dict]) -> float:
    """Spread (sample sd) of the AR-against-AR cell's per-unit log pair ratios."""
    x = np.array([u["log_ratio"] for u in ar_units.values()], dtype=float)
    return float(x.std(ddof=1)) if len(x) > 1 else float("nan")


def repeat_noise(units: dict[str, dict]) -> np.ndarray:
    """Single-run noise draws on a unit's log pair ratio: the difference of its first two
    recorded repeats ÷ √2, with both signs (empty where no unit has two)."""
    rs = [u["repeats"] for u in units.values() if len(u.get("repeats", ())) >= 2]
    d = np.array([(r[0] - r[1]) / math.sqrt(2) for r in rs])
    return np.concatenate([d, -d])


def method_noise(ar: tuple[float, float], units: dict[str, dict]) -> tuple[float, float]:
    """(s_now, s_baseline): the ar cells' spreads, or the method's own recorded noise where larger
    (judged at ar's, a noisier method fails an unchanged tree too often); the baseline's unit is
    the mean of R repeats, a run's one pair."""
    own = repeat_noise(units)
    if not len(own):
        return ar
    sd = float(np.sqrt(np.mean(own**2)))
    repeats = min(len(u["repeats"]) for u in units.values())
    return max(ar[0], sd), max(ar[1], sd / math.sqrt(repeats))


def threshold(se: float, tol: float) -> float:
    """t of the rule above (a positive log change)."""
    return max(Z95 * se, -math.log(1 - tol) / 2)


def power(se: float, tol: float) -> float:
    """P(the rule fails a run whose tokens/s dropped by `tol`), D ~ N(log(1 − tol), SE²)."""
    drop = -math.log(1 - tol)
    return NormalDist().cdf((drop - threshold(se, tol)) / se) if se > 0 else 1.0


def paired_change(base: dict[str, dict], now: dict[str, dict]) -> tuple[float, int]:
    """(D, n): mean paired change in log pair ratio over the units both measured."""
    common = sorted(set(base) & set(now))
    if not common:
        return float("nan"), 0
    d = [now[u]["log_ratio"] - base[u]["log_ratio"] for u in common]
    return float(np.mean(d)), len(common)


def standard_error(n: int, s_now: float, s_base: float) -> float:
    """SE of D from the two runs' AR-against-AR spreads over n units."""
    return math.sqrt((s_now**2 + s_base**2) / n)


def fails_speedup(
    d: float, n: int, s_now: float, s_base: float, tol: float, widen: float = 1.0
) -> bool:
    return d < -threshold(standard_error(n, s_now, s_base) * widen, tol)


def geo_speedup(units: dict[str, dict]) -> float | None:
    return math.exp(np.mean([u["log_ratio"] for u in units.values()])) if units else None


def median_widening(methods: int) -> float:
    """SE factor of D_m − C when C is the median of `methods` D's (0: no common part taken)."""
    return math.sqrt(1 + math.pi / (2 * methods)) if methods else 1.0


def common_part(changes: list[float]) -> tuple[float, int]:
    """(C, M): the median paired change of the M methods (ar left out by the caller); C = 0
    with fewer than 3, where a median is no estimate of what they share."""
    if len(changes) < 3:
        return 0.0, 0
    return float(np.median(changes)), len(changes)


def check_common(c: float, methods: int, tol: Tolerances) -> Row:
    """The machine-wide row: fails when every method slowed by more than common_tol alike."""
    floor = math.log(1 - tol.common_tol)
    rule = (
        f"median paired change of {methods} methods {math.exp(c) - 1:+.1%} ≥ "
        f"{-tol.common_tol:.0%} (a drop of everything alike: engine, verify path or machine)"
    )
    return Row("all", "speedup", 1.0, math.exp(c), rule, "REGRESSION" if c < floor else "ok")


def check_speedup(
    method: str,
    base: dict,
    now: dict,
    noise: tuple[float, float],
    tol: Tolerances,
    common: tuple[float, int] = (0.0, 0),
) -> Row:
    """base/now: {unit: {log_ratio, ...}}; noise: (s_now, s_baseline) of the two runs' ar cells;
    common: (C, M) of common_part, subtracted from this method's paired change."""
    d, n = paired_change(base, now)
    b, m = geo_speedup(base), geo_speedup(now)
    if n < 2 or any(_missing(s) for s in noise):
        return Row(method, "speedup", b, m, f"{n} common units: not compared", "REGRESSION")
    c, methods = common
    widen = median_widening(methods)
    se = standard_error(n, *noise) * widen
    t = threshold(se, tol.speedup_tol)
    p = power(se, tol.speedup_tol)
    shared = f", {math.exp(c) - 1:+.1%} machine-wide" if methods else ""
    rule = (
        f"paired change {math.exp(d) - 1:+.1%}{shared}, own {math.exp(d - c) - 1:+.1%} ≥ "
        f"{math.exp(-t) - 1:.1%} ({n} units, SE {se:.3f}, power {p:.0%} at "
        f"−{tol.speedup_tol:.0%})"
    )
    d -= c
    if fails_speedup(d, n, *noise, tol.speedup_tol, widen):
        return Row(method, "speedup", b, m, rule, "REGRESSION")
    if p < 0.9:
        return Row(method, "speedup", b, m, rule, "underpowered")
    return Row(method, "speedup", b, m, rule, "better" if d > t else "ok")


# --- the deterministic checks -----------------------------------------------------------------
def compared_units(outputs: dict[str, list], now: dict[str, dict], same_kind: bool) -> list[str]:
    """Units whose output can be checked: all on the baseline's CPU kind; elsewhere those whose
    reference stream (this run's AR side) equals the committed output."""
    units = sorted(set(outputs) & set(now))
    return units if same_kind else [u for u in units if now[u]["reference"] == outputs[u]]


def check_tokens(method: str, outputs: dict, now: dict, units: list[str]) -> Row:
    same = sum(now[u]["ids"] == outputs[u] for u in units)
    left = len(set(outputs) & set(now)) - len(units)
    rule = f"all {len(units)} units equal the committed ids" + (
        f" ({left} left out: this CPU's AR stream differs)" if left else ""
    )
    if not units:
        return Row(method, "tokens", None, None, rule, "REGRESSION")
    verdict = "ok" if same == len(units) else "REGRESSION"
    return Row(method, "tokens", 1.0, same / len(units), rule, verdict)


def tau_over(units: dict[str, dict], keys: list[str]) -> float | None:
    fwd = sum(units[u]["forwards"] for u in keys)
    return sum(units[u]["new_tokens"] for u in keys) / fwd if fwd else None


def check_tau(method: str, base: dict, now: dict, units: list[str], tol: Tolerances) -> Row:
    b, n = tau_over(base, units), tau_over(now, units)
    floor = None if b is None else b * (1 - tol.tau_tol)
    rule = f"≥ {floor:.3f} (−{tol.tau_tol:.0%})" if floor is not None else "–"
    if floor is None or n is None:
        return Row(method, "tau", b, n, rule, "REGRESSION")
    verdict = "REGRESSION" if n < floor else "better" if n > b * (1 + tol.tau_tol) else "ok"
    return Row(method, "tau", b, n, rule, verdict)


def check_exact(method: str, base: dict, now: dict, tol: Tolerances) -> Row:
    b, n = base.get("exact_match"), now.get("exact_match")
    if _missing(b):  # T > 0: no greedy check
        return Row(method, "exact_match", b, n, "– (T > 0)", "ok")
    floor = b - tol.exact_match_tol
    rule = f"≥ {floor:.2f}"
    if _missing(n) or n < floor - 1e-9:
        return Row(method, "exact_match", b, n, rule, "REGRESSION")
    return Row(method, "exact_match", b, n, rule, "better" if n > b + 1e-9 else "ok")


# --- all rows ---------------------------------------------------------------------------------
def compare(
    base: dict,
    now: dict[str, dict],
    tol: Tolerances,
    skipped: dict[str, str] | None = None,
    same_kind: bool = True,
) -> list[Row]:
    """Rows for every method in the baseline or measured now (baseline order, then new ones).
    base: one machine's entry of the baseline file ({"outputs", "methods"}); now: {method:
    {"summary": overall row, "units": units_of(...)}}."""
    skipped = skipped or {}
    methods, outputs = base.get("methods", {}), base.get("outputs", {})
    noise = (
        noise_sd(now["ar"]["units"]) if "ar" in now else float("nan"),
        noise_sd(methods["ar"]["units"]) if "ar" in methods else float("nan"),
    )
    rows: list[Row] = []
    common = (0.0, 0)
    if same_kind:
        both = [m for m in methods if m != "ar" and m in now]
        common = common_part([paired_change(methods[m]["units"], now[m]["units"])[0] for m in both])
        common = common if all(math.isfinite(x) for x in common) else (0.0, 0)
    for method in list(methods) + [m for m in now if m not in methods]:
        b, n = methods.get(method), now.get(method)
        if b is None:
            rows += [
                Row(method, m, None, None, "no baseline: record with --update", "new")
                for m in ("tokens", "exact_match", "tau", "speedup")
            ]
            continue
        if n is None:
            why = skipped.get(method, "did not run")
            rows += [
                Row(method, m, None, None, f"not measured: {why}", "missing")
                for m in ("tokens", "exact_match", "tau", "speedup")
            ]
            continue
        units = compared_units(outputs, n["units"], same_kind)
        rows += [
            check_tokens(method, outputs, n["units"], units),
            check_exact(method, b["summary"], n["summary"], tol),
            check_tau(method, b["units"], n["units"], units, tol),
        ]
        if same_kind:
            own = (0.0, 0) if method == "ar" else common
            s = method_noise(noise, b["units"])
            rows.append(check_speedup(method, b["units"], n["units"], s, tol, own))
        else:
            rows.append(
                Row(
                    method,
                    "speedup",
                    None,
                    geo_speedup(n["units"]),
                    "no baseline for this CPU kind: reported, not gated",
                    "not gated",
                )
            )
    if common[1]:
        rows.append(check_common(*common, tol))
    if same_kind:
        rows += machine_tokens_per_s(methods, now, tol)
    return rows


def machine_tokens_per_s(base: dict, now: dict, tol: Tolerances) -> list[Row]:
    """The machine-wide tokens/s row: the median over every method both runs measured (ar
    included) of log(tokens/s now ÷ tokens/s recorded), each the cell's overall figure; fails
    below log(1 − machine_tps_tol). A uniform slowdown of the engine slows ar as much as the
    rest, which the speedup rows (ratios to ar) cannot see."""
    logs = [
        math.log(now[m]["summary"]["tokens_per_s"] / base[m]["summary"]["tokens_per_s"])
        for m in base
        if m in now
        and (base[m]["summary"].get("tokens_per_s") or 0) > 0
        and (now[m]["summary"].get("tokens_per_s") or 0) > 0
    ]
    if not logs:
        return []
    c = float(np.median(logs))
    rule = (
        f"median change of {len(logs)} methods' tokens/s {math.exp(c) - 1:+.1%} ≥ "
        f"{-tol.machine_tps_tol:.0%} (everything slower alike, ar included)"
    )
    bad = c < math.log(1 - tol.machine_tps_tol)
    return [Row("all", "tokens_per_s", 1.0, math.exp(c), rule, "REGRESSION" if bad else "ok")]


def env_problems(base_env: dict, now_env: dict) -> tuple[list[str], list[str]]:
    """(blocking, notes): a different model, dtype or device makes the comparison meaningless;
    a different library version is worth a note (the CPU kind selects the baseline entry)."""
    blocking, notes = [], []
    for key in ("model", "dtype", "device"):
        if base_env.get(key) != now_env.get(key):
            blocking.append(f"baseline {key}={base_env.get(key)!r}, now {now_env.get(key)!r}")
    for key in ("gpu", "torch", "transformers"):
        if base_env.get(key) != now_env.get(key):
            notes.append(f"{key}: baseline {base_env.get(key)!r}, now {now_env.get(key)!r}")
    return blocking, notes
