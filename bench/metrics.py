"""The run summary (docs/metrics.md states every definition in words).

Unit of comparison: one prompt × turn, measured in interleaved pairs (baseline and method
adjacent in time); repeats flagged by bench.interference are left out where quiet ones exist.
    speedup           median over units of the unit's median pair ratio
                      (method tokens/s ÷ baseline tokens/s of one pair); 95% interval:
                      percentile bootstrap of that median over units (2,000 resamples)
    speedup_totals    Σ new tokens ÷ Σ wall time, method over baseline (unit times: medians of
                      quiet repeats): the ratio of totals, kept as a second view
    tokens/s          Σ new tokens ÷ Σ wall time (prefill + decode, as Spec-Bench)
    disturbed_units   units whose first repeats were disturbed; remeasured: units given extra
                      pairs; unclean_units: units still without enough quiet pairs (flagged)
    drafting metrics  bench.acceptance (τ and its variants, α conditional and marginal, ...)
    predicted_speedup the cost model of bench.acceptance on the run's measured cost curve
    draft overhead    Σ draft time ÷ Σ wall time
    TTFT, TPOT        medians; TPOT = (wall − TTFT) ÷ (new − 1)
    memory            extra weights/buffers held by the method + (method − baseline) peak delta
    exact_match       fraction of prompts (all turns) whose greedy ids equal the baseline's
    dist_pvalue       check=distribution's p-value (bench/distcheck.py, docs/sampling.md)
Rows: one per task × method config, per (task, category) when a task spans several categories
(question files), and task=all over everything.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench import acceptance

KEYS = ["task", "category", "method", "k", "temperature", "device", "engine", "weights", "dtype"]
COLUMNS = KEYS + [
    "n_prompts",
    "new_tokens",
    "tokens_per_s",
    "baseline_tokens_per_s",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "speedup_totals",
    "disturbed_units",
    "remeasured",
    "unclean_units",
    "tau",
    "tau_round",
    "accepted_per_round",
    "tau_request",
    "acceptance_rate",
    "alpha_per_pos",
    "alpha_marginal",
    "accept_hist",
    "accept_by_depth",
    "accept_by_position",
    "predicted_speedup",
    "draft_overhead",
    "memory_overhead_mb",
    "ttft_ms",
    "tpot_ms",
    "exact_match",
    "near_ties",
    "mismatches",
    "dist_pvalue",
    "skipped_prompts",
    "partial",
]
UNIT = ["task", "prompt_id", "turn"]


def bootstrap_ratio(num_m, den_m, num_b, den_b, n_boot=2000, seed=0) -> tuple[float, float]:
    """95% percentile interval of (Σnum_m/Σden_m) ÷ (Σnum_b/Σden_b), resampling units."""
    num_m, den_m, num_b, den_b = map(np.asarray, (num_m, den_m, num_b, den_b))
    n = len(num_m)
    if n < 2:
        r = (num_m.sum() / den_m.sum()) / (num_b.sum() / den_b.sum())
        return float(r), float(r)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    r = (num_m[idx].sum(1) / den_m[idx].sum(1)) / (num_b[idx].sum(1) / den_b[idx].sum(1))
    lo, hi = np.percentile(r, [2.5, 97.5])
    return float(lo), float(hi)


def bootstrap_median(x, n_boot=2000, seed=0) -> tuple[float, float]:
    """95% percentile interval of the median of x, resampling its elements."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return float(x[0]), float(x[0])
    idx = np.random.default_rng(seed).integers(0, len(x), size=(n_boot, len(x)))
    lo, hi = np.percentile(np.median(x[idx], axis=1), [2.5, 97.5])
    return float(lo), float(hi)


def _quiet(df: pd.DataFrame) -> pd.Series:
    return df["quiet"].astype(bool) if "quiet" in df else pd.Series(True, index=df.index)


def unit_speed(method: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    """Per unit: the median pair ratio over quiet pairs (all pairs if none is quiet), the unit's
    median times over quiet repeats, and its interference flags."""
    cols = UNIT + ["repeat", "new_tokens", "wall_s"]
    m = method[cols].assign(quiet=_quiet(method).values)
    b = base[cols].assign(quiet=_quiet(base).values)
    pairs = m.merge(b, on=UNIT + ["repeat"], suffixes=("_m", "_b"))
    pairs["ratio"] = (pairs.new_tokens_m / pairs.wall_s_m) / (pairs.new_tokens_b / pairs.wall_s_b)
    pairs["both"] = pairs.quiet_m & pairs.quiet_b
    rows = []
    for key, g in pairs.groupby(UNIT, sort=True):
        use = g[g.both] if g.both.any() else g
        qm = g[g.quiet_m] if g.quiet_m.any() else g
        qb = g[g.quiet_b] if g.quiet_b.any() else g
        rows.append(
            {
                **dict(zip(UNIT, key)),
                "ratio": float(use.ratio.median()),
                "new_m": int(g.new_tokens_m.iloc[0]),
                "wall_m": float(qm.wall_s_m.median()),
                "new_b": int(g.new_tokens_b.iloc[0]),
                "wall_b": float(qb.wall_s_b.median()),
            }
        )
    return pd.DataFrame(rows)


def flags(method: pd.DataFrame) -> dict:
    if "unit_disturbed" not in method:
        return {"disturbed_units": 0, "remeasured": 0, "unclean_units": 0}
    u = method[method.repeat == 0].groupby(UNIT)
    return {
        "disturbed_units": int(u.unit_disturbed.first().astype(bool).sum()),
        "remeasured": int((u.remeasured.first() > 0).sum()),
        "unclean_units": int((~u.unit_clean.first().astype(bool)).sum()),
    }


def summarize_group(method: pd.DataFrame, base: pd.DataFrame, costs: dict | None = None) -> dict:
    speed = unit_speed(method, base)
    lo, hi = bootstrap_median(speed.ratio)
    tps = speed.new_m.sum() / speed.wall_m.sum()
    btps = speed.new_b.sum() / speed.wall_b.sum()
    rep0 = method[method.repeat == 0]
    drafted = rep0.drafted_tokens.sum()
    peak_m = method.peak_mem_delta_mb.median() if method.peak_mem_delta_mb.notna().any() else 0.0
    peak_b = base.peak_mem_delta_mb.median() if base.peak_mem_delta_mb.notna().any() else 0.0
    mem = float(method.extra_mb.max()) + max(0.0, float(peak_m - peak_b))
    greedy = float(method.temperature.iloc[0]) == 0
    exact = None
    if greedy:
        per_prompt = rep0.groupby(["task", "prompt_id"]).verdict.apply(
            lambda v: bool((v == "exact").all())
        )
        exact = float(per_prompt.mean())
    pv = method.dist_pvalue.dropna() if "dist_pvalue" in method else pd.Series(dtype=float)
    draft = acceptance.drafting(rep0)
    rounds = (rep0.target_forwards - 1).sum()
    width = (drafted / rounds + 1) if rounds else 1.0
    draft_per_round = float(rep0.draft_s.sum() / rounds) if rounds else 0.0
    quiet = method[_quiet(method)] if _quiet(method).any() else method
    return {
        "n_prompts": int(rep0[["task", "prompt_id"]].drop_duplicates().shape[0]),
        "new_tokens": int(rep0.new_tokens.sum()),
        "tokens_per_s": float(tps),
        "baseline_tokens_per_s": float(btps),
        "speedup": float(speed.ratio.median()),
        "speedup_ci_low": lo,
        "speedup_ci_high": hi,
        "speedup_totals": float(tps / btps),
        **flags(method),
        **draft,
        "acceptance_rate": float(rep0.accepted_tokens.sum() / drafted) if drafted else None,
        "predicted_speedup": acceptance.predicted_speedup(
            draft["tau_round"], width, draft_per_round, costs or {}
        ),
        "draft_overhead": float(quiet.draft_s.sum() / quiet.wall_s.sum()),
        "memory_overhead_mb": round(mem, 3),
        "ttft_ms": float(quiet.ttft_s.median() * 1e3),
        "tpot_ms": float(quiet.tpot_s.dropna().median() * 1e3)
        if quiet.tpot_s.notna().any()
        else None,
        "exact_match": exact,
        "near_ties": int((rep0.verdict == "near-tie").sum()) if greedy else None,
        "mismatches": int((rep0.verdict == "mismatch").sum()) if greedy else None,
        "dist_pvalue": float(pv.min()) if len(pv) else None,
    }


def summarize(records: pd.DataFrame, costs: dict | None = None, skipped: int = 0) -> pd.DataFrame:
    """summary.csv: per task × method config, per (task, category) where a task spans several
    categories, and task=all when several tasks ran. costs: the run's c(q) in seconds."""
    rows = []
    if "engine" not in records:  # records written before engines existed ran transformers as is
        records = records.assign(engine="hf", weights=records["dtype"])
    if "category" not in records:
        records = records.assign(category=records["task"])
    method = records[records.role == "method"]
    base = records[records.role == "baseline"]
    tasks = sorted(method.task.unique())
    scopes = []
    for t in tasks:
        scopes.append((t, "all", method.task == t, base.task == t))
        cats = sorted(method[method.task == t].category.dropna().unique())
        if len(cats) > 1:
            scopes += [
                (
                    t,
                    c,
                    (method.task == t) & (method.category == c),
                    (base.task == t) & (base.category == c),
                )
                for c in cats
            ]
    if len(tasks) > 1:
        scopes.append(("all", "all", method.task.notna(), base.task.notna()))
    for task, cat, mm, bm in scopes:
        for key, grp in method[mm].groupby(KEYS[2:], dropna=False):
            row = dict(zip(KEYS, (task, cat, *key)))
            row.update(summarize_group(grp, base[bm], costs))
            row["skipped_prompts"] = skipped if task == "all" or len(tasks) == 1 else None
            row["partial"] = False  # bench.runner.execute marks an interrupted run
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)
