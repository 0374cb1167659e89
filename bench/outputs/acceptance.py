"""Drafting metrics under the names the field uses (docs/metrics.md maps them to vLLM, SGLang
and EAGLE), computed from the per-round lists every record carries.

A *round* is one draft → verify → accept cycle; a_r is the number of drafted tokens it
accepted (before truncation at EOS or the token budget), d_r its drafted depth.
    tau                 Σ new tokens ÷ Σ target forwards, the prefill forward counted (AR: 1)
    tau_round           1 + mean_r a_r over every verify round, bonus included, a round that
                        drafted nothing (k=auto's plain rounds) counting 1 (Spec-Bench's
                        "#Mean accepted tokens", per decoding step)
    tau_drafted         1 + mean_r a_r over the rounds that drafted (d_r ≥ 1), bonus included
                        (vLLM's mean acceptance length, 1 + accepted ÷ drafts, our servers'
                        tau_nonempty; EAGLE's τ, whose every round drafts)
    accepted_per_round  mean_r a_r = tau_round − 1 (drafts accepted per round, no bonus)
    tau_request         mean over requests (turns) of each one's tau
    accept_hist         [#rounds with a_r = 0, = 1, ...]
    accept_by_depth     {d: mean a_r over rounds that drafted depth d}
    alpha_per_pos       (conditional) rounds whose position i was accepted ÷ rounds that
                        drafted a position i
    alpha_marginal      (marginal) share of rounds with a_r ≥ i; 1 + Σ_i alpha_marginal_i =
                        tau_round exactly (tests/test_metrics.py)
    accept_by_position  mean a_r by the output position where the round started (early vs
                        late tokens of long answers), bins of POSITION_BINS
"""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd

from engines.probe import anchored, interpolate

POSITION_BINS = (0, 32, 64, 128, 256, 512)


def _rounds(df: pd.DataFrame, col: str) -> list[int]:
    if col not in df:
        return []
    return [x for xs in df[col] if isinstance(xs, list) for x in xs]


def round_counts(rep0: pd.DataFrame) -> tuple[list[int], list[int]]:
    """Per unit (record): (accepted drafts, verify rounds). Records without per-round counts
    (imported answers, servers) count every forward after the prefill as a round and the tokens
    after the prefill's beyond one per round as accepted."""
    if "round_accepted" in rep0 and rep0.round_accepted.notna().all():
        return [sum(r) for r in rep0.round_accepted], [len(r) for r in rep0.round_accepted]
    fwd = pd.to_numeric(rep0.target_forwards, errors="coerce")
    known = fwd.notna()  # a record without forwards tells nothing
    rounds = [int(f) - 1 for f in fwd[known]]
    new = [int(n) for n in rep0.new_tokens[known]]
    return [n - 1 - r for n, r in zip(new, rounds)], rounds


def tau_round_of(rep0: pd.DataFrame) -> float:
    """τ_round = Σ (accepted + 1) ÷ Σ rounds over the records; a method without rounds (ar)
    emits one token per decoding step: 1."""
    acc, rounds = round_counts(rep0)
    return float(1 + sum(acc) / sum(rounds)) if sum(rounds) else 1.0


def drafted_round_counts(rep0: pd.DataFrame) -> tuple[list[int], list[int]] | None:
    """Per unit (record): (accepted drafts, rounds that drafted: d_r ≥ 1), from the per-round
    lists; None where a record has none (imported answers, servers: their counters say
    nothing of which rounds drafted)."""
    cols = ("round_accepted", "round_depth")
    if any(c not in rep0 or rep0[c].isna().any() for c in cols):
        return None
    drafted = [sum(d > 0 for d in depths) for depths in rep0.round_depth]
    return [sum(a) for a in rep0.round_accepted], drafted


def tau_drafted_of(rep0: pd.DataFrame) -> float | None:
    """τ_drafted = 1 + Σ a_r ÷ #{r : d_r ≥ 1}: the bonus token once per drafting round, as
    vLLM's 1 + num_accepted_tokens ÷ num_drafts (bench.serve.scrape's tau_nonempty); None
    when no round drafted or the records hold no rounds."""
    counts = drafted_round_counts(rep0)
    if counts is None or not sum(counts[1]):
        return None
    return float(1 + sum(counts[0]) / sum(counts[1]))


def per_position(counts: pd.Series) -> list[int]:
    width = max((len(c) for c in counts), default=0)
    total = [0] * width
    for c in counts:
        for i, v in enumerate(c):
            total[i] += v
    return total


def bin_label(lo: int, hi: int | None) -> str:
    return f"{lo}-{hi - 1}" if hi is not None else f"{lo}+"


def drafting(m: pd.DataFrame) -> dict:
    """The metrics above over method records (one per unit)."""
    acc = _rounds(m, "round_accepted")
    depth = _rounds(m, "round_depth")
    start = _rounds(m, "round_start")
    n = len(acc)
    out = {
        "tau": float(m.new_tokens.sum() / m.target_forwards.sum()),
        "tau_request": float((m.new_tokens / m.target_forwards).mean()),
        "tau_round": tau_round_of(m) if n else None,
        "accepted_per_round": sum(acc) / n if n else None,
    }
    hist = Counter(acc)
    out["accept_hist"] = json.dumps([hist.get(i, 0) for i in range(max(acc, default=-1) + 1)])
    by_depth: dict[int, list[int]] = {}
    for a, d in zip(acc, depth):
        by_depth.setdefault(d, []).append(a)
    out["accept_by_depth"] = json.dumps(
        {str(d): round(sum(v) / len(v), 4) for d, v in sorted(by_depth.items())}
    )
    top = max(depth, default=0)
    out["alpha_marginal"] = json.dumps(
        [round(sum(a >= i for a in acc) / n, 4) for i in range(1, top + 1)] if n else []
    )
    dpp, app = per_position(m.drafted_per_pos), per_position(m.accepted_per_pos)
    out["alpha_per_pos"] = json.dumps(
        [round(a / d, 4) if d else None for a, d in zip(app + [0] * len(dpp), dpp)]
    )
    bins: dict[str, list[int]] = {}
    edges = list(POSITION_BINS) + [None]
    for a, s in zip(acc, start):
        for lo, hi in zip(edges, edges[1:]):
            if hi is None or s < hi:
                bins.setdefault(bin_label(lo, hi), []).append(a)
                break
    out["accept_by_position"] = json.dumps({k: round(sum(v) / len(v), 4) for k, v in bins.items()})
    return out


def predicted_speedup(
    tau_round: float | None,
    width,
    draft_per_round: float,
    costs: dict,
    base_step: float | None = None,
    first: float = 0.0,
    decode: float | None = None,
) -> float | None:
    """The cost model: τ_round ÷ ((mean c(w) + draft time per round) ÷ c(1)), with c the
    measured cost of a target forward over w tokens (interpolated on the run's curve); width:
    the mean tokens per verify, or each round's (k=auto's sizes vary from round to round).

    With the baseline's measured time per decoded token `base_step` (s_b), the part of a
    real step the curve does not time (a longer context, sampling, the loop: s_b − c(1)) is
    added to every round, and with `first` (the time to the first token) and `decode` (tokens
    decoded after it, per turn) the prediction is for whole turns, as the speedup is measured:
    (F + n·s_b) ÷ (F + n·s_b ÷ step speedup). A curve timed above s_b is brought down to it
    first (engines.probe.anchored: the turns, not the curve's few repeats, set its level)."""
    if not tau_round or not costs:
        return None
    costs = anchored(costs, base_step)
    c1 = costs[min(costs)]
    ws = list(width) if isinstance(width, (list, tuple)) else [width]
    verify = sum(interpolate(costs, w) for w in ws) / len(ws)
    if base_step is None:
        return tau_round / ((verify + draft_per_round) / c1)
    step = tau_round * base_step / (verify + max(base_step - c1, 0.0) + draft_per_round)
    if not decode:
        return step
    base = first + decode * base_step
    return base / (first + decode * base_step / step)
