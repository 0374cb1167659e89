"""The regression gate's verdicts: pure functions from (baseline, now, tolerances) to rows.

Per method, from its overall summary row (task='all'):
    τ            deterministic at T = 0: fails when  now < baseline × (1 − tau_tol)
    exact_match  deterministic at T = 0: fails when  now < baseline − exact_match_tol
    speedup      noisy (wall clock): fails only when the whole 95% interval lies below the
                 tolerated floor, i.e.  now.ci_high < baseline × (1 − speedup_tol)
A method in the baseline that did not run now fails ("missing"); a method that ran but has no
baseline yet passes as "new" (record it with --update). Rises are reported, never failed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

METRICS = (
    "tau",
    "exact_match",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "tokens_per_s",
    "baseline_tokens_per_s",
    "mismatches",
    "near_ties",
    "n_prompts",
    "k",
)


@dataclass(frozen=True)
class Tolerances:
    tau_tol: float = 0.02  # relative drop of τ allowed
    exact_match_tol: float = 0.0  # absolute drop of exact_match allowed
    speedup_tol: float = 0.15  # relative drop of speedup allowed below the baseline's point value

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
    verdict: str  # ok | better | REGRESSION | missing | new

    @property
    def failed(self) -> bool:
        return self.verdict in ("REGRESSION", "missing")

    @property
    def change(self) -> float | None:
        if _missing(self.baseline) or _missing(self.now):
            return None
        if self.metric == "exact_match":
            return self.now - self.baseline  # absolute: a fraction of prompts
        return (self.now - self.baseline) / self.baseline if self.baseline else None


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def check_tau(method: str, base: dict, now: dict, tol: Tolerances) -> Row:
    b, n = base.get("tau"), now.get("tau")
    floor = None if _missing(b) else b * (1 - tol.tau_tol)
    rule = f"≥ {floor:.3f} (−{tol.tau_tol:.0%})" if floor is not None else "–"
    if floor is None or _missing(n):
        return Row(method, "tau", b, n, rule, "ok" if _missing(b) else "REGRESSION")
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


def check_speedup(method: str, base: dict, now: dict, tol: Tolerances) -> Row:
    b, hi = base.get("speedup"), now.get("speedup_ci_high")
    n = now.get("speedup")
    if _missing(b):
        return Row(method, "speedup", b, n, "–", "ok")
    floor = b * (1 - tol.speedup_tol)
    rule = f"95% CI high ≥ {floor:.2f} (−{tol.speedup_tol:.0%})"
    if _missing(hi) or hi < floor:
        return Row(method, "speedup", b, n, rule, "REGRESSION")
    lo = now.get("speedup_ci_low")
    better = not _missing(lo) and lo > b * (1 + tol.speedup_tol)
    return Row(method, "speedup", b, n, rule, "better" if better else "ok")


def compare(
    baseline: dict[str, dict],
    now: dict[str, dict],
    tol: Tolerances,
    skipped: dict[str, str] | None = None,
) -> list[Row]:
    """Rows for every method in the baseline or measured now (baseline order, then new ones)."""
    skipped = skipped or {}
    rows: list[Row] = []
    for method in list(baseline) + [m for m in now if m not in baseline]:
        b, n = baseline.get(method), now.get(method)
        if b is None:
            rows += [
                Row(method, m, None, n.get(m), "no baseline: record with --update", "new")
                for m in ("tau", "exact_match", "speedup")
            ]
        elif n is None:
            why = skipped.get(method, "did not run")
            rows += [
                Row(method, m, b.get(m), None, f"not measured: {why}", "missing")
                for m in ("tau", "exact_match", "speedup")
            ]
        else:
            rows += [
                check_tau(method, b, n, tol),
                check_exact(method, b, n, tol),
                check_speedup(method, b, n, tol),
            ]
    return rows


def env_problems(base_env: dict, now_env: dict) -> tuple[list[str], list[str]]:
    """(blocking, notes): a different model, dtype or device makes the comparison meaningless;
    a different CPU/GPU or library version is worth a note (speedups may move with hardware)."""
    blocking, notes = [], []
    for key in ("model", "dtype", "device"):
        if base_env.get(key) != now_env.get(key):
            blocking.append(f"baseline {key}={base_env.get(key)!r}, now {now_env.get(key)!r}")
    for key in ("cpu", "gpu", "torch", "transformers"):
        if base_env.get(key) != now_env.get(key):
            notes.append(f"{key}: baseline {base_env.get(key)!r}, now {now_env.get(key)!r}")
    return blocking, notes
