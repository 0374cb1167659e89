"""The run summary: every summary.csv column is a registered metric (`@metric` below: its
columns, its function, one line of documentation); docs/metrics.md defines each in words.

Unit of comparison: one prompt × turn, measured in interleaved pairs (baseline and method
adjacent in time); repeats flagged by bench.run.interference are left out where quiet ones exist.
The speedup is the median over units of the unit's median pair ratio (method tokens/s ÷
baseline tokens/s of one pair), with a percentile-bootstrap 95% interval over units.
Rows: one per task × method config, per (task, category) when a task spans several categories
(question files), and task=all over everything.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from bench.decode.turn import step_rounds
from bench.outputs import acceptance
from bench.outputs.answers import answer_turns
from groundfloor.stats import bootstrap_median, bootstrap_ratio, wilson

KEYS = ["task", "category", "method", "k", "temperature", "device", "engine", "weights", "dtype"]
KEYS += ["batch"]  # conversations decoded together
KEYS += ["kv_dtype"]  # the KV cache's dtype (model.kv_dtype, resolved)
KEYS += ["target_format", "draft_format"]  # Q4_1 | bf16 (from Q4_1) | ...; self:int4 | int8 | none
UNIT = ["task", "prompt_id", "turn"]


def _quiet(df: pd.DataFrame) -> pd.Series:
    return df["quiet"].astype(bool) if "quiet" in df else pd.Series(True, index=df.index)


def pairs(method: pd.DataFrame, base: pd.DataFrame, extra=()) -> pd.DataFrame:
    """The interleaved pairs of a cell: repeat r of the method and of the baseline on each unit
    side by side (columns suffixed _m and _b; `extra` columns kept too), with their pair ratio
    `ratio` = method tokens/s ÷ baseline tokens/s."""
    cols = UNIT + ["repeat", "new_tokens", "wall_s", *extra]
    p = method[cols].merge(base[cols], on=UNIT + ["repeat"], suffixes=("_m", "_b"))
    p["ratio"] = (p.new_tokens_m / p.wall_s_m) / (p.new_tokens_b / p.wall_s_b)
    return p


def unit_speed(method: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    """Per unit: the median pair ratio over quiet pairs (all pairs if none is quiet), the unit's
    median times over quiet repeats, and its interference flags."""
    both = pairs(
        method.assign(quiet=_quiet(method).values),
        base.assign(quiet=_quiet(base).values),
        extra=["quiet"],
    )
    both["both"] = both.quiet_m & both.quiet_b
    rows = []
    for key, g in both.groupby(UNIT, sort=True):
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


class Scope:
    """The records one summary row is computed from: the method's and the baseline's (every
    repeat), the run's cost curve, and what several metrics share, computed once."""

    def __init__(self, method: pd.DataFrame, base: pd.DataFrame, costs: dict | None):
        self.method, self.base, self.costs = method, base, costs or {}
        self.rep0 = method[method.repeat == 0]  # drafting counts: one repeat per unit
        q = _quiet(method)
        self.quiet = method[q] if q.any() else method  # times: the quiet repeats
        self.greedy = float(method.temperature.iloc[0]) == 0

    @cached_property
    def speed(self) -> pd.DataFrame:
        return unit_speed(self.method, self.base)

    @cached_property
    def draft(self) -> dict:
        return acceptance.drafting(self.rep0)

    @cached_property
    def batches(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Each side's batch runs (batch=B; empty at batch=1)."""
        return batch_runs(self.method), batch_runs(self.base)


@dataclass(frozen=True)
class Metric:
    columns: tuple[str, ...]  # summary.csv columns it fills
    fn: Callable[[Scope], object]  # → a value (one column) or a tuple in `columns` order
    doc: str


METRICS: list[Metric] = []


def ci(name: str) -> list[str]:
    """A metric with its interval: its three columns (value, 95% low, 95% high)."""
    return [name, f"{name}_ci_low", f"{name}_ci_high"]


def metric(*columns: str, doc: str, interval: bool = False):
    """Register a summary metric: its definition (the function), its columns and one line of
    documentation, in one place; summary.csv's columns follow the registration order, and
    tests/test_metrics.py checks that docs/metrics.md defines every column. interval=True: each
    name fills three columns, `name`, `name_ci_low`, `name_ci_high`, and the function returns a
    (value, low, high) triple per name (one triple for one name)."""

    def register(fn):
        if not interval:
            METRICS.append(Metric(columns, fn, doc))
            return fn
        names = tuple(n for c in columns for n in ci(c))

        def flat(x: Scope):
            triples = fn(x)
            return tuple(v for t in (triples if len(columns) > 1 else (triples,)) for v in t)

        METRICS.append(Metric(names, flat, doc))
        return fn

    return register


@metric("n_prompts", doc="prompts measured")
def _n_prompts(x: Scope):
    return int(x.rep0[["task", "prompt_id"]].drop_duplicates().shape[0])


@metric("new_tokens", doc="new tokens of the method, repeat 0")
def _new_tokens(x: Scope):
    return int(x.rep0.new_tokens.sum())


@metric("tokens_per_s", "baseline_tokens_per_s", doc="Σ new tokens ÷ Σ wall time, each side")
def _tokens_per_s(x: Scope):
    s = x.speed
    return float(s.new_m.sum() / s.wall_m.sum()), float(s.new_b.sum() / s.wall_b.sum())


@metric(
    "speedup",
    interval=True,
    doc="median over units of the median pair ratio; bootstrap 95% interval",
)
def _speedup(x: Scope):
    return (float(x.speed.ratio.median()), *bootstrap_median(x.speed.ratio))


@metric("speedup_totals", doc="ratio of the two sides' tokens_per_s")
def _speedup_totals(x: Scope):
    m, b = _tokens_per_s(x)
    return float(m / b)


def specbench_speedup(method: pd.DataFrame, base: pd.DataFrame) -> float | None:
    """Spec-Bench's statistic: evaluation/speed.py's formula on the answer files the run writes,
    read from the same records (bench.outputs.answers.answer_turns: repeat 0, one answer per
    question). Per question, tokens/s = Σ tokens ÷ Σ wall time over its turns, the method's
    tokens as emitted (`new_tokens`), the baseline's recounted from its answer text
    (`recount_tokens`, len(tokenizer(text).input_ids) − 1 per turn; `new_tokens` where not
    recorded); then

        speedup_specbench = mean over the method's questions of its tokens/s
                            ÷ mean over the baseline's questions of its tokens/s

    a ratio of two means, the questions not paired (each file is averaged on its own)."""
    m = specbench_tokens_per_s(method, "method", "new_tokens")
    b = specbench_tokens_per_s(base, "baseline", "recount_tokens")
    return float(m / b) if m is not None and b else None


def specbench_tokens_per_s(df: pd.DataFrame, role: str, tokens: str) -> float | None:
    """The mean over one answer file's questions of Σ tokens ÷ Σ wall time over their turns,
    the tokens from the column `tokens` (`new_tokens` in a turn without it)."""
    speeds = []
    for turns in answer_turns(df.to_dict("records"), role).values():
        tok = sum(r["new_tokens"] if pd.isna(r.get(tokens)) else r[tokens] for r in turns)
        wall = sum(float(r["wall_s"]) for r in turns)
        if wall > 0:
            speeds.append(tok / wall)
    return sum(speeds) / len(speeds) if speeds else None


@metric(
    "speedup_specbench",
    doc="Spec-Bench's evaluation/speed.py on the run's answer files (repeat 0): the mean "
    "per-question tokens/s of the method over the baseline's, its tokens recounted from its text",
)
def _speedup_specbench(x: Scope):
    return specbench_speedup(x.method, x.base)


def unit_decode(method: pd.DataFrame, base: pd.DataFrame) -> pd.Series:
    """Per unit: the median over its quiet pairs (all pairs if none is quiet) of the baseline's
    TPOT ÷ the method's, TPOT = (wall − TTFT) ÷ (new tokens − 1) (`tpot_s`); pairs without a
    TPOT on either side (one new token) left out."""
    both = pairs(
        method.assign(quiet=_quiet(method).values),
        base.assign(quiet=_quiet(base).values),
        extra=["quiet", "tpot_s"],
    )
    both = both[(both.tpot_s_m > 0) & (both.tpot_s_b > 0)]
    both = both.assign(decode=both.tpot_s_b / both.tpot_s_m, both=both.quiet_m & both.quiet_b)
    units = [(g[g.both] if g.both.any() else g).decode.median() for _, g in both.groupby(UNIT)]
    return pd.Series(units, dtype=float)


@metric(
    "decode_speedup",
    doc="speedup with the prefill excluded: median over units of the unit's median pair ratio "
    "of TPOT (baseline ÷ method, TPOT = (wall − TTFT) ÷ (new − 1)), quiet pairs",
)
def _decode_speedup(x: Scope):
    if "tpot_s" not in x.method or "tpot_s" not in x.base:
        return None
    units = unit_decode(x.method, x.base)
    return float(units.median()) if len(units) else None


def unit_loops(x: Scope) -> pd.Series | None:
    """Per unit of x.speed: does it loop (groundfloor.loops), on either side in any repeat?
    At T = 0 an exact method's turn is the baseline's, so this is the baseline's greedy output;
    at T > 0 a loop sampled by either side counts. None for records without the flag."""
    if "loop" not in x.method or "loop" not in x.base:
        return None
    recs = pd.concat([x.method[UNIT + ["loop"]], x.base[UNIT + ["loop"]]])
    flag = recs.loop.astype("boolean").fillna(False).astype(bool)
    looped = flag.groupby([recs[c] for c in UNIT]).any()
    units = pd.MultiIndex.from_frame(x.speed[UNIT])
    return pd.Series(looped.reindex(units, fill_value=False).to_numpy(), index=x.speed.index)


@metric(
    "loop_share",
    "speedup_noloop",
    doc="share of the units whose turn loops (groundfloor.loops: either side, any repeat), "
    "and the speedup (speedup's estimator) over the units without a loop",
)
def _loops(x: Scope):
    looped = unit_loops(x)
    if looped is None or not len(looped):
        return None, None
    rest = x.speed.ratio[~looped]
    return float(looped.mean()), (float(rest.median()) if len(rest) else None)


@metric("disturbed_units", "remeasured", "unclean_units", doc="interference flags")
def _flags(x: Scope):
    f = flags(x.method)
    return f["disturbed_units"], f["remeasured"], f["unclean_units"]


TAUS = ("accepted_per_round", "tau_request")
DETAIL = ("alpha_per_pos", "alpha_marginal", "accept_hist", "accept_by_depth", "accept_by_position")


@metric(
    "tau",
    "tau_round",
    interval=True,
    doc="τ (Σ new ÷ Σ target forwards) and τ per round (bench.outputs.acceptance), each with its "
    "95% bootstrap interval over prompt × turn units (repeat 0)",
)
def _tau_intervals(x: Scope):
    r, nan = x.rep0, (math.nan, math.nan)
    ones = np.ones(len(r))
    tau = (
        bootstrap_ratio(r.new_tokens.to_numpy(), r.target_forwards.to_numpy(), ones, ones)
        if len(r) and r.target_forwards.sum()
        else nan
    )
    if not len(r) or "round_accepted" not in r or r.round_accepted.isna().any():
        per_round = nan
    else:
        acc, rounds = (np.array(v, dtype=float) for v in acceptance.round_counts(r))
        per_round = (
            (1.0, 1.0) if rounds.sum() == 0 else bootstrap_ratio(acc + rounds, rounds, ones, ones)
        )
    return (x.draft["tau"], *tau), (x.draft["tau_round"], *per_round)


@metric(
    "tau_drafted",
    interval=True,
    doc="τ over the rounds that drafted: 1 + Σ accepted ÷ drafting rounds (vLLM's mean "
    "acceptance length, the servers' tau_nonempty; EAGLE's τ), with its 95% bootstrap interval "
    "over prompt × turn units (repeat 0); empty where no round drafted",
)
def _tau_drafted(x: Scope):
    counts = acceptance.drafted_round_counts(x.rep0) if len(x.rep0) else None
    if counts is None or not sum(counts[1]):
        return math.nan, math.nan, math.nan
    acc, drafted = (np.array(v, dtype=float) for v in counts)
    acc, drafted = acc[drafted > 0], drafted[drafted > 0]  # a unit that never drafted adds 0/0
    ones = np.ones(len(acc))
    return (acceptance.tau_drafted_of(x.rep0), *bootstrap_ratio(acc + drafted, drafted, ones, ones))


@metric(*TAUS, doc="τ's other variants (bench.outputs.acceptance)")
def _taus(x: Scope):
    return tuple(x.draft[c] for c in TAUS)


@metric(
    "acceptance_rate",
    doc="Σ accepted draft tokens ÷ Σ drafted, repeat 0: the drafted rounds, as k=auto selected "
    "them (alpha1_forced reads the drafter without the selection)",
)
def _acceptance_rate(x: Scope):
    drafted = x.rep0.drafted_tokens.sum()
    return float(x.rep0.accepted_tokens.sum() / drafted) if drafted else None


@metric(
    "alpha1_forced",
    interval=True,
    doc="a learned drafter's first-token acceptance with every round drafting one token: Σ "
    "alpha1_accepted ÷ Σ alpha1_drafted over the untimed forced pass on the first turn of each "
    "prompt (bench.run.forced), pooled over the row's prompts, with Wilson's 95% binomial "
    "interval; empty for methods without a learned drafter",
)
def _alpha1_forced(x: Scope):
    n, acc = alpha1_counts(x.rep0)
    if not n:
        return math.nan, math.nan, math.nan
    return (acc / n, *wilson(acc, n))


@metric("alpha1_forced_n", doc="the drafted first tokens alpha1_forced pools (its binomial n)")
def _alpha1_forced_n(x: Scope):
    n, _ = alpha1_counts(x.rep0)
    return n or None


def alpha1_counts(rep0: pd.DataFrame) -> tuple[int, int]:
    """(Σ alpha1_drafted, Σ alpha1_accepted) over repeat 0's first turns, one per prompt."""
    if "alpha1_drafted" not in rep0:
        return 0, 0
    first = rep0[(rep0.turn == 0) & rep0.alpha1_drafted.notna()]
    return int(first.alpha1_drafted.sum()), int(first.alpha1_accepted.sum())


@metric(*DETAIL, doc="acceptance by position and depth (bench.outputs.acceptance)")
def _acceptance_detail(x: Scope):
    return tuple(x.draft[c] for c in DETAIL)


@metric(
    "predicted_speedup",
    doc="bench.outputs.acceptance's cost model on the run's cost curve, for whole turns (the "
    "baseline's measured step and time to first token)",
)
def _predicted(x: Scope):
    rounds = (x.rep0.target_forwards - 1).sum()
    # tokens verified per round: lookahead's Jacobi window rides in the verify too
    col = "verified_tokens" if "verified_tokens" in x.rep0 else "drafted_tokens"
    width = (x.rep0[col].sum() / rounds + 1) if rounds else 1.0
    r0 = x.rep0
    if "round_k" in r0 and r0.round_k.notna().all() and (r0[col] == r0.drafted_tokens).all():
        sizes = [k + 1 for ks in r0.round_k for k in ks]  # each round's verify, as drafted
        width = sizes if len(sizes) == rounds and sum(sizes) == r0[col].sum() + rounds else width
    per_round = float(x.rep0.draft_s.sum() / rounds) if rounds else 0.0
    b = x.base
    decoded = (b.new_tokens - 1).clip(lower=0)
    if not len(b) or not decoded.sum():
        return acceptance.predicted_speedup(x.draft["tau_round"], width, per_round, x.costs)
    base_step = float((b.wall_s - b.ttft_s).sum() / decoded.sum())  # the baseline's s_b
    return acceptance.predicted_speedup(
        x.draft["tau_round"],
        width,
        per_round,
        x.costs,
        base_step=base_step,
        first=float(b.ttft_s.mean()),
        decode=float(decoded.mean()),
    )


@metric("draft_overhead", doc="Σ draft time ÷ Σ wall time, quiet repeats")
def _draft_overhead(x: Scope):
    return float(x.quiet.draft_s.sum() / x.quiet.wall_s.sum())


@metric(
    "draft_step_cost",
    doc="d: drafting time per sequential drafter forward ÷ one target forward c(1), quiet "
    "repeats, read from the steady rounds (those after a drafted round: the head's or draft "
    "model's step with its reading of the last verify; a turn's first round and one after plain "
    "rounds also catch the drafter up on the prompt or the plain tokens, which draft_overhead "
    "counts and this does not; with no steady round, the rounds after plain ones, their catch-up "
    "included: an upper bound, never the prompt's catch-up); Leviathan et al.'s cost coefficient "
    "c; empty for methods that draft by lookup",
)
def _draft_step_cost(x: Scope):
    q = x.quiet
    if "draft_steps" not in q or not x.costs or not q.draft_steps.notna().any():
        return None
    c1 = x.costs[min(x.costs)]
    if "round_draft_s" in q and "round_steps" in q:
        secs = steps = late_secs = late_steps = 0.0
        for times, own in q[["round_draft_s", "round_steps"]].dropna().itertuples(index=False):
            a, b, c, d = step_rounds(times, own)
            secs, steps, late_secs, late_steps = secs + a, steps + b, late_secs + c, late_steps + d
        if steps:
            return float(secs / steps / c1)
        if late_steps:  # no steady round: the rounds after plain ones, catch-up included
            return float(late_secs / late_steps / c1)
    steps = q.draft_steps.sum()
    return float(q.draft_s.sum() / steps / c1) if steps else None


def k_histogram(rounds) -> dict:
    """{draft size chosen: rounds} over the records' `round_k` lists."""
    out: dict[int, int] = {}
    for ks in rounds:
        for k in ks:
            out[int(k)] = out.get(int(k), 0) + 1
    return dict(sorted(out.items()))


@metric(
    "mean_k",
    "k_hist",
    "plain_rounds",
    doc="the draft size each round chose (chain: tokens, tree: nodes; k=auto picks it per round, "
    "a fixed k drafts up to k): its mean over rounds, its histogram as size:rounds, and the "
    "share of rounds that drafted nothing (speculation switched off: a plain decoding step)",
)
def _chosen_k(x: Scope):
    m = x.method
    if "round_k" not in m or not m.round_k.notna().any():
        return None, None, None
    hist = k_histogram(r for r in m.round_k.dropna())
    n = sum(hist.values())
    if not n:
        return None, None, None
    mean = sum(k * c for k, c in hist.items()) / n
    text = " ".join(f"{k}:{c}" for k, c in hist.items())
    return round(mean, 3), text, round(hist.get(0, 0) / n, 3)


@metric(
    "memory_overhead_mb",
    doc="static drafter memory + (method − baseline) peak delta, nothing counted twice",
)
def _memory(x: Scope):
    """What the method holds before a turn (drafter weights, kept indexes: `static_mb`) plus
    how much higher the turn's peak goes than the baseline's, which already holds the turn's
    own drafter state (draft KV cache, head cache, per-turn index: `state_mb`, not added)."""

    def peak(df):
        return df.peak_mem_delta_mb.median() if df.peak_mem_delta_mb.notna().any() else 0.0

    static = x.method.static_mb if "static_mb" in x.method else x.method.extra_mb  # older runs
    mem = float(static.max()) + max(0.0, float(peak(x.method) - peak(x.base)))
    return round(mem, 3)


def batch_runs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per batch run of a side (batch=B records): its wall time, new tokens, forwards,
    rows and quiet flag; empty for a run decoded one conversation at a time."""
    cols = ["batch_wall_s", "batch_new_tokens", "batch_forwards", "batch_rows", "batch_quiet"]
    if "batch_wall_s" not in df or df.batch_wall_s.isna().all():
        return pd.DataFrame(columns=cols)
    return df.dropna(subset=["batch_wall_s"]).groupby("repeat")[cols].first()


def _throughput(runs: pd.DataFrame) -> float:
    quiet = runs[runs.batch_quiet.astype(bool)] if runs.batch_quiet.astype(bool).any() else runs
    return float(quiet.batch_new_tokens.sum() / quiet.batch_wall_s.sum())


@metric(
    "batch_tokens_per_s",
    "batch_baseline_tokens_per_s",
    "batch_speedup",
    "rows_per_forward",
    doc="batch=B: each side's aggregate throughput (Σ new tokens ÷ Σ wall time of its batch runs "
    "over every conversation of the run, quiet runs), their ratio, and the method's target rows "
    "per shared forward; empty at batch=1",
)
def _batch(x: Scope):
    m, b = x.batches
    if m.empty or b.empty:
        return None, None, None, None
    tm, tb = _throughput(m), _throughput(b)
    return tm, tb, tm / tb, float(m.batch_rows.sum() / m.batch_forwards.sum())


@metric(
    "batch_memory_overhead_mb",
    doc="batch=B: what the method holds beyond the baseline at B: every slot's drafter (each "
    "slot its own) plus B sequences' drafter state at its largest turn (an upper bound); "
    "empty at batch=1",
)
def _batch_memory(x: Scope):
    if x.batches[0].empty or "batch_static_mb" not in x.method:
        return None
    static = float(x.method.batch_static_mb.max()) - float(x.base.batch_static_mb.max())
    state = float(x.method.state_mb.max()) if "state_mb" in x.method else 0.0
    return round(static + int(x.method.batch.max()) * state, 3)


@metric(
    "tpot_p50_ms",
    "tpot_p90_ms",
    doc="the method's time per output token per sequence (after its first token), quiet "
    "repeats: at batch=B each sequence's latency under the batch's load",
)
def _tpot_percentiles(x: Scope):
    tpot = x.quiet.tpot_s.dropna() if "tpot_s" in x.quiet else pd.Series(dtype=float)
    if tpot.empty:
        return None, None
    return float(tpot.quantile(0.5) * 1e3), float(tpot.quantile(0.9) * 1e3)


@metric("ttft_ms", "tpot_ms", doc="medians over quiet repeats")
def _latency(x: Scope):
    q = x.quiet
    tpot = float(q.tpot_s.dropna().median() * 1e3) if q.tpot_s.notna().any() else None
    return float(q.ttft_s.median() * 1e3), tpot


WORST = {"exact": 0, "after-divergence": 1, "near-tie": 2, "mismatch": 3}


def unit_verdicts(method: pd.DataFrame) -> pd.Series:
    """Per unit (prompt × turn): its worst greedy verdict over every judged repeat."""
    judged = method[method.verdict.notna()] if "verdict" in method else method.iloc[:0]
    if judged.empty:
        return pd.Series(dtype=object)
    rank = judged.verdict.map(WORST).fillna(3)
    worst = rank.groupby([judged[c] for c in UNIT]).max()
    names = {v: k for k, v in WORST.items()}
    return worst.map(names)


def verdict_summary(method: pd.DataFrame) -> tuple[float | None, int, int]:
    """(share of prompts exact on every turn of every repeat, units with a near-tie, units with
    a mismatch): the greedy verdicts of all repeats, not only the first."""
    units = unit_verdicts(method)
    if units.empty:
        return None, 0, 0
    by_prompt = (units == "exact").groupby(level=["task", "prompt_id"]).all()
    return (
        float(by_prompt.mean()),
        int((units == "near-tie").sum()),
        int((units == "mismatch").sum()),
    )


@metric("exact_match", "near_ties", "mismatches", doc="greedy verdicts of every repeat")
def _verdicts(x: Scope):
    return verdict_summary(x.method) if x.greedy else (None, None, None)


@metric(
    "speedup_exact",
    "exact_units",
    doc="speedup over the units whose every repeat matched the baseline exactly (greedy)",
)
def _speedup_exact(x: Scope):
    if not x.greedy:
        return None, None
    units = unit_verdicts(x.method)
    exact = units[units == "exact"].index
    key = x.speed.set_index(UNIT).index
    ratios = x.speed.ratio[key.isin(exact)]
    return (float(ratios.median()) if len(ratios) else None), int(len(ratios))


@metric(
    "dist_pvalue",
    "dist_status",
    doc="check=distribution over the tasks it sampled in this row (bench.run.distcheck): "
    "Bonferroni over the tested tasks, or untested",
)
def _dist_pvalue(x: Scope):
    m = x.method
    if "dist_status" not in m:  # records written before the per-task check: one run p-value
        pv = m.dist_pvalue.dropna() if "dist_pvalue" in m else pd.Series(dtype=float)
        return (float(pv.min()), "tested") if len(pv) else (None, None)
    sampled = m[m.dist_status.notna()].groupby("task").first()  # one sampled unit per task
    if sampled.empty:  # not checked, or no unit of this row was sampled
        return None, None
    tested = sampled.dist_pvalue[sampled.dist_status == "tested"].astype(float)
    if tested.empty:
        return None, "untested"
    return min(1.0, len(tested) * float(tested.min())), "tested"  # Bonferroni over tasks


RUN_COLUMNS = ["skipped_prompts", "partial"]  # set per run by summarize and bench.run.runner
COLUMNS = KEYS + [c for m in METRICS for c in m.columns] + RUN_COLUMNS


def summarize_group(method: pd.DataFrame, base: pd.DataFrame, costs: dict | None = None) -> dict:
    """Every registered metric over one row's records."""
    x, row = Scope(method, base, costs), {}
    for m in METRICS:
        value = m.fn(x)
        row.update(zip(m.columns, value if len(m.columns) > 1 else (value,)))
    return row


def summarize(records: pd.DataFrame, costs: dict | None = None, skipped: int = 0) -> pd.DataFrame:
    """summary.csv: per task × method config, per (task, category) where a task spans several
    categories, and task=all when several tasks ran. costs: the run's c(q) in seconds."""
    rows = []
    if "engine" not in records:  # records written before engines existed ran transformers as is
        records = records.assign(engine="hf", weights=records["dtype"])
    if "category" not in records:
        records = records.assign(category=records["task"])
    if "batch" not in records:  # records written before batch=B decoded one at a time
        records = records.assign(batch=1)
    if "kv_dtype" not in records:  # written before model.kv_dtype: the activations' dtype
        records = records.assign(kv_dtype=records["dtype"] if "dtype" in records else None)
    if "target_format" not in records:  # written before the formats had columns of their own
        records = records.assign(target_format=records["weights"], draft_format="none")
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
            row["partial"] = False  # bench.run.runner.execute marks an interrupted run
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)
