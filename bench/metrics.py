"""Metric definitions (docs/metrics.md states them in words) and the run summary.

Unit of comparison: one prompt × turn. Its time is the median over repeats.
    tokens/s       = Σ new tokens ÷ Σ wall time (prefill + decode, as Spec-Bench)
    speedup        = method tokens/s ÷ baseline tokens/s on the same units, same run;
                     95% interval: percentile bootstrap over units (2,000 resamples)
    τ              = Σ new tokens ÷ Σ target forwards (prefill counted: AR scores exactly 1)
    α              = Σ accepted draft tokens ÷ Σ drafted tokens; α_i the same per draft position
    draft overhead = Σ draft time ÷ Σ wall time
    TTFT           = median time to the first token; TPOT = median (wall − TTFT) ÷ (new − 1)
    memory         = extra weights/buffers held by the method + (method − baseline) peak delta
    exact_match    = fraction of prompts (all turns) whose greedy ids equal the baseline's
    dist_pvalue    = check=distribution's two-sample p-value, carried on the method records
                     (bench/distcheck.py, docs/sampling.md); the smallest if several differ
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

KEYS = ["task", "method", "k", "temperature", "device", "engine", "weights", "dtype"]
COLUMNS = KEYS + ["n_prompts", "new_tokens", "tokens_per_s", "baseline_tokens_per_s", "speedup",
                  "speedup_ci_low", "speedup_ci_high", "tau", "acceptance_rate",
                  "alpha_per_pos", "draft_overhead", "memory_overhead_mb", "ttft_ms", "tpot_ms",
                  "exact_match", "near_ties", "mismatches", "dist_pvalue"]


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


def per_position(counts: pd.Series) -> list[int]:
    width = max((len(c) for c in counts), default=0)
    total = [0] * width
    for c in counts:
        for i, v in enumerate(c):
            total[i] += v
    return total


def _units(df: pd.DataFrame) -> pd.DataFrame:
    """One row per prompt × turn: median times over repeats; counts from repeat 0."""
    g = df.groupby(["task", "prompt_id", "turn"], sort=True)
    first = g.first()
    med = g[["wall_s", "draft_s", "ttft_s", "tpot_s"]].median()
    out = first.drop(columns=["wall_s", "draft_s", "ttft_s", "tpot_s"]).join(med)
    return out


def summarize_group(method: pd.DataFrame, base: pd.DataFrame) -> dict:
    m, b = _units(method), _units(base)
    common = m.index.intersection(b.index)
    m, b = m.loc[common], b.loc[common]
    tps = m.new_tokens.sum() / m.wall_s.sum()
    btps = b.new_tokens.sum() / b.wall_s.sum()
    lo, hi = bootstrap_ratio(m.new_tokens, m.wall_s, b.new_tokens, b.wall_s)
    drafted = m.drafted_tokens.sum()
    dpp, app = per_position(m.drafted_per_pos), per_position(m.accepted_per_pos)
    alpha_pos = [round(a / d, 4) if d else None for a, d in zip(app + [0] * len(dpp), dpp)]
    peak_m = method.peak_mem_delta_mb.median() if method.peak_mem_delta_mb.notna().any() else 0.0
    peak_b = base.peak_mem_delta_mb.median() if base.peak_mem_delta_mb.notna().any() else 0.0
    mem = float(method.extra_mb.max()) + max(0.0, float(peak_m - peak_b))
    greedy = float(method.temperature.iloc[0]) == 0
    exact = None
    if greedy:
        per_prompt = method[method.repeat == 0].groupby(["task", "prompt_id"]).verdict.apply(
            lambda v: bool((v == "exact").all()))
        exact = float(per_prompt.mean())
    rep0 = method[method.repeat == 0]
    pv = method.dist_pvalue.dropna() if "dist_pvalue" in method else pd.Series(dtype=float)
    return {
        "n_prompts": int(m.reset_index()[["task", "prompt_id"]].drop_duplicates().shape[0]),
        "new_tokens": int(m.new_tokens.sum()),
        "tokens_per_s": float(tps), "baseline_tokens_per_s": float(btps),
        "speedup": float(tps / btps), "speedup_ci_low": lo, "speedup_ci_high": hi,
        "tau": float(m.new_tokens.sum() / m.target_forwards.sum()),
        "acceptance_rate": float(m.accepted_tokens.sum() / drafted) if drafted else None,
        "alpha_per_pos": json.dumps(alpha_pos),
        "draft_overhead": float(m.draft_s.sum() / m.wall_s.sum()),
        "memory_overhead_mb": round(mem, 3),
        "ttft_ms": float(m.ttft_s.median() * 1e3),
        "tpot_ms": float(m.tpot_s.dropna().median() * 1e3) if m.tpot_s.notna().any() else None,
        "exact_match": exact,
        "near_ties": int((rep0.verdict == "near-tie").sum()) if greedy else None,
        "mismatches": int((rep0.verdict == "mismatch").sum()) if greedy else None,
        "dist_pvalue": float(pv.min()) if len(pv) else None,
    }


def summarize(records: pd.DataFrame) -> pd.DataFrame:
    """summary.csv: one row per task × method config, plus task=all when several tasks ran."""
    rows = []
    if "engine" not in records:  # records written before engines existed ran transformers as is
        records = records.assign(engine="hf", weights=records["dtype"])
    method = records[records.role == "method"]
    base = records[records.role == "baseline"]
    tasks = sorted(method.task.unique())
    scopes = [(t, method.task == t, base.task == t) for t in tasks]
    if len(tasks) > 1:
        scopes.append(("all", method.task.notna(), base.task.notna()))
    for task, mm, bm in scopes:
        for key, grp in method[mm].groupby(KEYS[1:], dropna=False):
            row = dict(zip(KEYS, (task, *key)))
            row.update(summarize_group(grp, base[bm]))
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)
