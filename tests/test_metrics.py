"""Metric arithmetic on hand-made records."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.metrics import bootstrap_ratio, summarize


def rec(role, pid, rep, new, wall, fwd, drafted=0, accepted=0, dpp=(), app=(), verdict=None,
        draft_s=0.0, task="code", extra=0.0, peak=1.0):
    return {"task": task, "prompt_id": pid, "turn": 0, "repeat": rep, "role": role,
            "method": "ngram", "k": 4, "temperature": 0.0, "device": "cpu", "dtype": "float32",
            "new_tokens": new, "wall_s": wall, "draft_s": draft_s, "ttft_s": 0.1,
            "tpot_s": (wall - 0.1) / (new - 1), "target_forwards": fwd,
            "drafted_tokens": drafted, "accepted_tokens": accepted,
            "drafted_per_pos": list(dpp), "accepted_per_pos": list(app), "extra_mb": extra,
            "peak_mem_delta_mb": peak, "verdict": verdict, "dist_pvalue": None}


def records():
    rows = []
    for rep in (0, 1):
        # baseline: 10 tokens/s on both prompts; repeats differ (medians are used)
        rows.append(rec("baseline", "p1", rep, 20, 2.0 + rep * 0.2, 20))
        rows.append(rec("baseline", "p2", rep, 40, 4.0 - rep * 0.2, 40))
        rows.append(rec("method", "p1", rep, 20, 1.0, 8, drafted=16, accepted=12,
                        dpp=(8, 8), app=(7, 5), verdict="exact", draft_s=0.1, extra=2.0, peak=3.0))
        rows.append(rec("method", "p2", rep, 40, 1.0, 20, drafted=40, accepted=20,
                        dpp=(20, 20), app=(12, 8), verdict="mismatch" if rep == 0 else "exact",
                        draft_s=0.3, extra=2.0, peak=3.0))
    return pd.DataFrame(rows)


def test_summary_arithmetic():
    s = summarize(records())
    assert len(s) == 1
    r = s.iloc[0]
    assert r.n_prompts == 2 and r.new_tokens == 60
    assert r.tokens_per_s == pytest.approx(60 / 2.0)
    assert r.baseline_tokens_per_s == pytest.approx(60 / (2.1 + 3.9))  # medians of repeats
    assert r.speedup == pytest.approx(30 / 10)
    assert r.speedup_ci_low <= r.speedup <= r.speedup_ci_high
    assert r.tau == pytest.approx(60 / 28)
    assert r.acceptance_rate == pytest.approx(32 / 56)
    assert json.loads(r.alpha_per_pos) == pytest.approx([19 / 28, 13 / 28], abs=1e-4)
    assert r.draft_overhead == pytest.approx(0.4 / 2.0)
    assert r.memory_overhead_mb == pytest.approx(2.0 + (3.0 - 1.0))
    assert r.exact_match == pytest.approx(0.5)  # p2 diverged in repeat 0
    assert r.mismatches == 1 and r.near_ties == 0


def test_overall_row_when_several_tasks():
    df = records()
    other = df.copy()
    other["task"] = "dialog"
    s = summarize(pd.concat([df, other]))
    assert list(s.task) == ["code", "dialog", "all"]
    assert s.set_index("task").loc["all", "n_prompts"] == 4


def test_bootstrap_interval_brackets_ratio_and_shrinks():
    import numpy as np
    rng = np.random.default_rng(0)
    wall_m = rng.uniform(0.9, 1.1, 200)
    wall_b = rng.uniform(1.9, 2.1, 200)
    new = np.full(200, 10)
    lo, hi = bootstrap_ratio(new, wall_m, new, wall_b)
    assert lo < 2.0 < hi and hi - lo < 0.05
    lo2, hi2 = bootstrap_ratio(new[:10], wall_m[:10], new[:10], wall_b[:10])
    assert hi2 - lo2 > hi - lo
