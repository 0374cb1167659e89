"""Metric arithmetic on hand-made records."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.outputs.metrics import summarize
from groundfloor.stats import bootstrap_ratio


def rec(
    role,
    pid,
    rep,
    new,
    wall,
    fwd,
    drafted=0,
    accepted=0,
    dpp=(),
    app=(),
    verdict=None,
    draft_s=0.0,
    task="code",
    extra=0.0,
    peak=1.0,
):
    return {
        "task": task,
        "prompt_id": pid,
        "turn": 0,
        "repeat": rep,
        "role": role,
        "method": "ngram",
        "k": 4,
        "temperature": 0.0,
        "device": "cpu",
        "dtype": "float32",
        "new_tokens": new,
        "wall_s": wall,
        "draft_s": draft_s,
        "ttft_s": 0.1,
        "tpot_s": (wall - 0.1) / (new - 1),
        "target_forwards": fwd,
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "drafted_per_pos": list(dpp),
        "accepted_per_pos": list(app),
        "static_mb": extra,
        "peak_mem_delta_mb": peak,
        "verdict": verdict,
        "dist_pvalue": None,
    }


def records():
    rows = []
    for rep in (0, 1):
        # baseline: 10 tokens/s on both prompts; repeats differ (medians are used)
        rows.append(rec("baseline", "p1", rep, 20, 2.0 + rep * 0.2, 20))
        rows.append(rec("baseline", "p2", rep, 40, 4.0 - rep * 0.2, 40))
        rows.append(
            rec(
                "method",
                "p1",
                rep,
                20,
                1.0,
                8,
                drafted=16,
                accepted=12,
                dpp=(8, 8),
                app=(7, 5),
                verdict="exact",
                draft_s=0.1,
                extra=2.0,
                peak=3.0,
            )
        )
        rows.append(
            rec(
                "method",
                "p2",
                rep,
                40,
                1.0,
                20,
                drafted=40,
                accepted=20,
                dpp=(20, 20),
                app=(12, 8),
                verdict="mismatch" if rep == 0 else "exact",
                draft_s=0.3,
                extra=2.0,
                peak=3.0,
            )
        )
    return pd.DataFrame(rows)


def test_summary_arithmetic():
    s = summarize(records())
    assert len(s) == 1
    r = s.iloc[0]
    assert r.n_prompts == 2 and r.new_tokens == 60
    assert r.tokens_per_s == pytest.approx(60 / 2.0)
    assert r.baseline_tokens_per_s == pytest.approx(60 / (2.1 + 3.9))  # medians of repeats
    # per unit the median pair ratio (p1: 2.0, 2.2 → 2.1; p2: 4.0, 3.8 → 3.9), then the median
    assert r.speedup == pytest.approx(3.0)
    assert r.speedup_ci_low == pytest.approx(2.1) and r.speedup_ci_high == pytest.approx(3.9)
    assert r.speedup_totals == pytest.approx(30 / 10)  # Σ tokens ÷ Σ median times
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


def round_records(rounds: dict[str, list[int]], depth: int = 4) -> pd.DataFrame:
    """One method and one baseline record per prompt; rounds: accepted drafts per round."""
    rows = []
    for pid, acc in rounds.items():
        new = 1 + sum(a + 1 for a in acc)
        starts = [1 + sum(a + 1 for a in acc[:i]) for i in range(len(acc))]
        for role in ("baseline", "method"):
            r = rec(
                role,
                pid,
                0,
                new,
                1.0,
                1 + len(acc) if role == "method" else new,
                drafted=depth * len(acc),
                accepted=sum(acc),
                dpp=[len(acc)] * depth,
                app=[sum(a > i for a in acc) for i in range(depth)],
            )
            r.update(
                round_accepted=acc if role == "method" else [],
                round_depth=[depth] * len(acc) if role == "method" else [],
                round_start=starts if role == "method" else [],
            )
            rows.append(r)
    return pd.DataFrame(rows)


def test_drafting_metrics_and_their_identities():
    rounds = {"p1": [4, 0, 2, 1], "p2": [3, 3, 0]}
    r = summarize(round_records(rounds)).iloc[0]
    # by hand: 7 rounds accepted 4 + 0 + 2 + 1 + 3 + 3 + 0 = 13 drafts; a_r >= 1 in 5 of them,
    # >= 2 in 4 (4, 2, 3, 3), >= 3 in 3 (4, 3, 3), >= 4 in 1
    assert r.accepted_per_round == pytest.approx(13 / 7)
    assert r.tau_round == pytest.approx(20 / 7)
    marginal = json.loads(r.alpha_marginal)
    assert marginal == pytest.approx([5 / 7, 4 / 7, 3 / 7, 1 / 7], abs=1e-4)
    assert 1 + sum(marginal) == pytest.approx(r.tau_round, abs=1e-3)  # the identity
    assert json.loads(r.accept_hist) == [2, 1, 1, 2, 1]
    assert json.loads(r.accept_by_depth) == {"4": pytest.approx(13 / 7, abs=1e-4)}
    # τ of the whole turn counts the prefill forward: new tokens ÷ (1 + rounds)
    assert r.tau == pytest.approx((12 + 10) / (5 + 4))
    assert r.tau_request == pytest.approx((12 / 5 + 10 / 4) / 2)
    by_pos = json.loads(r.accept_by_position)
    assert by_pos == {"0-31": pytest.approx(13 / 7, abs=1e-4)}


def test_predicted_speedup_is_the_cost_model():
    from bench.outputs.acceptance import interpolate, predicted_speedup

    costs = {1: 1.0, 2: 1.1, 4: 1.2, 8: 1.6}
    assert interpolate(costs, 3) == pytest.approx(1.15)
    assert interpolate(costs, 16) == pytest.approx(3.2)  # beyond the curve: proportional
    # τ_round 3 with a 5-token verify (1.3) and 0.2 of a step of drafting per round
    assert predicted_speedup(3.0, 5, 0.2, costs) == pytest.approx(3.0 / 1.5)
    # each round's own width: the mean of the costs, not the cost of the mean width
    assert predicted_speedup(3.0, [1, 8], 0.0, costs) == pytest.approx(3.0 / 1.3)
    # a real step 0.5 above c(1), paid every round; then whole turns with a 4-step first token
    step = 3.0 * 1.5 / (1.3 + 0.5 + 0.2)
    assert predicted_speedup(3.0, 5, 0.2, costs, base_step=1.5) == pytest.approx(step)
    whole = (4 + 10 * 1.5) / (4 + 10 * 1.5 / step)
    got = predicted_speedup(3.0, 5, 0.2, costs, base_step=1.5, first=4, decode=10)
    assert got == pytest.approx(whole)
    # a curve timed slower than the turns (c(1) 1.0 against a measured step of 0.8): its level
    # follows the step, its shape is kept, so a plain round predicts 1×, not 0.8×
    assert predicted_speedup(1.0, 1, 0.0, costs, base_step=0.8) == pytest.approx(1.0)
    assert predicted_speedup(3.0, 5, 0.0, costs, base_step=0.8) == pytest.approx(3.0 / 1.3)


def test_an_anchored_curve_keeps_its_shape_and_takes_the_steps_level():
    from engines.probe import anchored

    costs = {1: 0.02, 4: 0.03, 8: 0.05}
    assert anchored(costs, 0.025) == costs  # the step contains c(1): nothing to correct
    assert anchored(costs, None) == costs
    low = anchored(costs, 0.016)
    assert low[1] == pytest.approx(0.016)
    assert low[8] / low[1] == pytest.approx(costs[8] / costs[1])


def test_category_rows_for_a_task_spanning_categories():
    df = records()
    df["category"] = ["translation" if p == "p1" else "qa" for p in df.prompt_id]
    s = summarize(df)
    assert list(zip(s.task, s.category)) == [
        ("code", "all"),
        ("code", "qa"),
        ("code", "translation"),
    ]
    assert s.set_index("category").loc["qa", "n_prompts"] == 1


def test_quiet_pairs_replace_disturbed_ones():
    df = records()
    df["quiet"] = True
    df["unit_disturbed"] = False
    df["unit_clean"] = True
    df["remeasured"] = 0
    slow = (df.role == "baseline") & (df.prompt_id == "p1") & (df.repeat == 1)
    df.loc[slow, "wall_s"] = 20.0  # a disturbed baseline repeat: ratio 20 if it were used
    df.loc[slow, "quiet"] = False
    df.loc[df.prompt_id == "p1", "unit_disturbed"] = True
    df.loc[df.prompt_id == "p1", "remeasured"] = 1
    r = summarize(df).iloc[0]
    assert r.speedup == pytest.approx((2.0 + 3.9) / 2)  # p1 keeps only its quiet pair (2.0)
    assert r.disturbed_units == 1 and r.remeasured == 1 and r.unclean_units == 0


def test_every_summary_column_is_registered_once_and_documented():
    """A metric has one home: its @metric in bench/outputs/metrics.py, and its line in
    docs/metrics.md."""
    from bench.outputs.metrics import COLUMNS, KEYS, METRICS, RUN_COLUMNS
    from groundfloor.paths import ROOT

    registered = [c for m in METRICS for c in m.columns]
    assert len(registered) == len(set(registered)), "a column registered twice"
    assert COLUMNS == KEYS + registered + RUN_COLUMNS
    docs = (ROOT / "docs" / "metrics.md").read_text()
    missing = [c for c in registered + RUN_COLUMNS if f"`{c}`" not in docs]
    assert not missing, f"summary columns not in docs/metrics.md: {missing}"
    assert all(m.doc for m in METRICS)


def test_three_speedup_statistics_under_three_names():
    """speedup (median of paired unit ratios), speedup_totals (ratio of totals) and
    speedup_specbench (Spec-Bench's mean per-question tokens/s ratio, the baseline's tokens
    recounted from its text) differ when question lengths and ratios differ."""
    rows = []
    for pid, m_wall, b_wall, n in (("q1", 1.0, 1.0, 10), ("q2", 1.0, 4.0, 100)):
        rows.append(rec("method", pid, 0, n, m_wall, n, verdict="exact"))
        rows.append(rec("baseline", pid, 0, n, b_wall, n))
    r = summarize(pd.DataFrame(rows)).iloc[0]
    assert r.speedup == pytest.approx(2.5)  # ratios 1 and 4
    assert r.speedup_totals == pytest.approx((110 / 2) / (110 / 5))
    assert r.speedup_specbench == pytest.approx(55 / 17.5)  # means of 10, 100 and of 10, 25
    for row in rows:
        if row["role"] == "baseline":
            row["recount_tokens"] = row["new_tokens"] - 1  # Spec-Bench's recount
    r = summarize(pd.DataFrame(rows)).iloc[0]
    assert r.speedup_specbench == pytest.approx(55 / ((9 / 1 + 99 / 4) / 2))


def test_draft_step_cost_is_drafting_per_step_over_one_forward():
    df = records()
    costs = {1: 0.01, 8: 0.02}
    assert pd.isna(summarize(df, costs).iloc[0].draft_step_cost)  # no step counts: lookups
    # method draft time per repeat 0.1 + 0.3 s over 7 + 13 drafter forwards; c(1) = 10 ms
    df["draft_steps"] = [
        0 if r == "baseline" else (7 if p == "p1" else 13) for r, p in zip(df.role, df.prompt_id)
    ]
    r = summarize(df, costs).iloc[0]
    assert r.draft_step_cost == pytest.approx((2 * 0.4) / (2 * 20) / 0.01)
    assert pd.isna(summarize(df).iloc[0].draft_step_cost)  # no cost curve: no d


def test_draft_step_cost_reads_the_steady_rounds_when_recorded():
    df = records()
    costs = {1: 0.01, 8: 0.02}
    method = df.role == "method"
    df["draft_steps"] = [6 if m else 0 for m in method]
    # round 0 catches up on the prompt (50 ms), round 2 follows a plain round: neither counts
    df["round_steps"] = [[2, 0, 2, 2] if m else [] for m in method]
    df["round_draft_s"] = [[0.05, 0.0, 0.03, 0.004] if m else [] for m in method]
    r = summarize(df, costs).iloc[0]
    assert r.draft_step_cost == pytest.approx(0.004 / 2 / 0.01)
    # no steady round: the rounds after plain ones (catch-up included), not the prompt's round 0
    df["round_steps"] = [[1, 0, 1, 0, 1] if m else [] for m in method]
    df["round_draft_s"] = [[0.05, 0.0, 0.003, 0.0, 0.005] if m else [] for m in method]
    r = summarize(df, costs).iloc[0]
    assert r.draft_step_cost == pytest.approx(0.004 / 0.01)


def test_chosen_k_histogram_mean_and_plain_share():
    """k=auto's sizes per round, by hand: rounds 0, 0, 3, 1 and 4, 0 → mean 8/6, 3 of 6 plain."""
    df = records()
    method = df.role == "method"
    df["round_k"] = [([0, 0, 3, 1] if p == "p1" else [4, 0]) if m else None
                     for m, p in zip(method, df.prompt_id)]  # fmt: skip
    r = summarize(df[df.repeat == 0]).iloc[0]
    assert r.k_hist == "0:3 1:1 3:1 4:1"
    assert r.mean_k == pytest.approx(8 / 6, abs=1e-3) and r.plain_rounds == pytest.approx(0.5)


def test_decode_speedup_leaves_the_prefill_out():
    """One unit, both sides 1 s to the first token; then 10 tokens in 1 s (baseline) and in
    0.5 s (method): end to end 2.0 ÷ 1.5 s, the decode alone twice as fast."""
    rows = [rec("baseline", "p1", 0, 11, 2.0, 11), rec("method", "p1", 0, 11, 1.5, 6)]
    for row in rows:
        row["ttft_s"] = 1.0
        row["tpot_s"] = (row["wall_s"] - 1.0) / 10
    r = summarize(pd.DataFrame(rows)).iloc[0]
    assert r.speedup == pytest.approx(4 / 3)
    assert r.decode_speedup == pytest.approx(2.0)
    # records()'s two units (TTFT 0.1 s each side): per pair (wall_b − 0.1) ÷ (wall_m − 0.1);
    # p1: 1.9/0.9 and 2.1/0.9 → 2.0/0.9; p2: 3.9/0.9 and 3.7/0.9 → 3.8/0.9; their median 2.9/0.9
    assert summarize(records()).iloc[0].decode_speedup == pytest.approx(2.9 / 0.9)


def loop_records(loops: dict, ratios: dict) -> pd.DataFrame:
    """One unit per prompt, two repeats, pair ratio `ratios[pid]`; loops[pid]: (role, repeat)
    of the records that loop."""
    rows = []
    for pid, ratio in ratios.items():
        for rep in (0, 1):
            for role, wall in (("baseline", 1.0), ("method", 1.0 / ratio)):
                row = rec(role, pid, rep, 20, wall, 20)
                row["loop"] = (role, rep) in loops.get(pid, ())
                rows.append(row)
    return pd.DataFrame(rows)


def test_loop_share_and_the_speedup_without_loops():
    """Units p1 (4.0×), p2 (1.2×), p3 (0.9×): p1's baseline loops in repeat 0 only (a unit
    loops when any of its records does), so loop_share = 1/3 and speedup_noloop is the median
    of 1.2 and 0.9; a loop the method alone sampled (T > 0) counts too."""
    ratios = {"p1": 4.0, "p2": 1.2, "p3": 0.9}
    r = summarize(loop_records({"p1": [("baseline", 0)]}, ratios)).iloc[0]
    assert r.speedup == pytest.approx(1.2)
    assert r.loop_share == pytest.approx(1 / 3) and r.speedup_noloop == pytest.approx(1.05)
    r = summarize(loop_records({"p1": [("method", 1)], "p2": [("method", 0)]}, ratios)).iloc[0]
    assert r.loop_share == pytest.approx(2 / 3) and r.speedup_noloop == pytest.approx(0.9)
    every = {p: [("baseline", 0)] for p in ratios}
    r = summarize(loop_records(every, ratios)).iloc[0]
    assert r.loop_share == pytest.approx(1.0) and pd.isna(r.speedup_noloop)
    r = summarize(loop_records({}, ratios)).iloc[0]
    assert r.loop_share == 0 and r.speedup_noloop == pytest.approx(1.2)
    old = summarize(records()).iloc[0]  # records written before the flag: no figure
    assert pd.isna(old.loop_share) and pd.isna(old.speedup_noloop)


def test_the_console_marks_a_speedup_that_rests_on_loops():
    """↻ where units loop and without them the speedup is another: below 1 where the cell's is
    at least 1, below the cell's 95% interval, or no loop-free unit left; not otherwise."""
    from types import SimpleNamespace as Row

    from rich.console import Console

    from bench.outputs.table import print_summary, rests_on_loops

    def row(share, free, whole=1.3, low=1.1):
        return Row(loop_share=share, speedup_noloop=free, speedup=whole, speedup_ci_low=low)

    assert rests_on_loops(row(0.25, 0.95))  # loses without its loops
    assert rests_on_loops(row(0.25, 1.05))  # below the interval [1.1, …]
    assert rests_on_loops(row(1.0, float("nan")))  # every unit loops
    assert not rests_on_loops(row(0.25, 1.2))  # inside the interval, above 1
    assert not rests_on_loops(row(0.0, 0.5))  # no loop: the figure is the speedup's own
    assert not rests_on_loops(row(float("nan"), 0.5))  # records without the flag
    assert not rests_on_loops(row(0.25, 0.9, whole=0.95, low=0.85))  # a loss either way
    ratios = {"p1": 4.0, "p2": 1.2, "p3": 0.9}
    looped = {"p1": [("baseline", 0)], "p2": [("method", 1)]}  # 1.2× with, 0.9× without them
    console = Console(record=True, width=400)
    print_summary(summarize(loop_records(looped, ratios)), "t", console)
    text = console.export_text()
    assert "1.20×↻" in text and "67%" in text and "0.90×" in text
    assert "↻ the speedup rests on repetition loops" in text and "ngram (code)" in text
    for fine in ({}, {"p1": [("baseline", 0)]}):  # none; p1 alone: 1.05×, in [0.9, 4.0]
        console = Console(record=True, width=400)
        print_summary(summarize(loop_records(fine, ratios)), "t", console)
        assert "↻" not in console.export_text()


def plain_round_records() -> pd.DataFrame:
    """Two prompts whose k=auto left some rounds plain (drafted depth 0):
    p1: accepted 2, 0, 0, 1 at depths 3, 0, 3, 1 (three rounds drafted, three accepted);
    p2: accepted 0, 0, 4 at depths 0, 0, 4 (one round drafted, four accepted)."""
    rounds = {"p1": ([2, 0, 0, 1], [3, 0, 3, 1]), "p2": ([0, 0, 4], [0, 0, 4])}
    rows = []
    for pid, (acc, depth) in rounds.items():
        new = 1 + sum(a + 1 for a in acc)
        for role in ("baseline", "method"):
            r = rec(role, pid, 0, new, 1.0, 1 + len(acc) if role == "method" else new,
                    drafted=sum(depth), accepted=sum(acc))  # fmt: skip
            r.update(
                round_accepted=acc if role == "method" else [],
                round_depth=depth if role == "method" else [],
                round_start=[0] * len(acc) if role == "method" else [],
            )
            rows.append(r)
    return pd.DataFrame(rows)


def test_tau_drafted_leaves_plain_rounds_out_and_tau_round_counts_them():
    """7 accepted drafts over 7 rounds, 4 of which drafted: tau_round = 1 + 7/7 = 2 (a plain
    round counts 1 token), tau_drafted = 1 + 7/4 = 2.75 (vLLM's per drafting step). Its
    interval resamples the two units: p1 alone 1 + 3/3 = 2, p2 alone 1 + 4/1 = 5."""
    r = summarize(plain_round_records()).iloc[0]
    assert r.tau_round == pytest.approx(2.0)
    assert r.tau_drafted == pytest.approx(2.75)
    assert (r.tau_drafted_ci_low, r.tau_drafted_ci_high) == pytest.approx((2.0, 5.0))
    one = plain_round_records()
    one = one[one.prompt_id == "p2"]
    assert summarize(one).iloc[0].tau_drafted == pytest.approx(5.0)


def test_tau_drafted_is_empty_where_no_round_drafted():
    df = plain_round_records()
    df["round_accepted"] = [[0] * len(a) for a in df.round_accepted]
    df["round_depth"] = [[0] * len(a) for a in df.round_depth]
    r = summarize(df).iloc[0]
    assert r.tau_round == pytest.approx(1.0) and pd.isna(r.tau_drafted)


def test_alpha1_forced_pools_first_turns_with_wilsons_interval():
    """p1 drafted 10 first tokens and accepted 3, p2 30 and 9 (on their first turn's records;
    the repeat's copy and a later turn do not count again): 12 of 40 = 0.3, Wilson's interval
    0.1807-0.4543 (scipy.stats.binomtest(12, 40).proportion_ci(method="wilson"))."""
    df = records()
    counts = {"p1": (10, 3), "p2": (30, 9)}
    m = df.role == "method"
    df.loc[m, "alpha1_drafted"] = [counts[p][0] for p in df[m].prompt_id]
    df.loc[m, "alpha1_accepted"] = [counts[p][1] for p in df[m].prompt_id]
    later = df[m].assign(turn=1, alpha1_drafted=None, alpha1_accepted=None)
    base_later = df[~m].assign(turn=1)
    r = summarize(pd.concat([df, later, base_later], ignore_index=True)).iloc[0]
    assert r.alpha1_forced == pytest.approx(0.3) and r.alpha1_forced_n == 40
    assert r.alpha1_forced_ci_low == pytest.approx(0.18075, abs=1e-5)
    assert r.alpha1_forced_ci_high == pytest.approx(0.45430, abs=1e-5)
    assert r.acceptance_rate == pytest.approx(64 / 112)  # the timed rounds': another figure
    assert pd.isna(summarize(records()).iloc[0].alpha1_forced)  # no pass: empty
