"""The human-readable summary: a rich table over summary.csv rows.

A speedup marked † comes from a cell with units that stayed disturbed after re-measurement
(unclean_units > 0: read it with care); ‡ marks cells where disturbed units were re-measured
and cleaned. The footer says how many of each. ↻ marks a speedup that rests on repetition
loops (rests_on_loops; docs/metrics.md, *Loops and stop reasons*). A bound (oracle:
methods.registry.is_bound) is named with BOUND after it, here and in the report's labels, and
the footer says what it is.
"""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table

from methods.registry import is_bound

BOUND = " (bound)"  # after a bound's name: a perfect drafter's ceiling, not a method to deploy
BOUND_NOTE = (
    "(bound): the target's own greedy answer as the draft, decoded outside the clock: the "
    "ceiling of any drafter at that k, not a method to rank or deploy."
)


def k_label(r) -> str:
    """k as asked; k=auto with the mean size its rounds chose, and how many drafted nothing."""
    mean, plain = getattr(r, "mean_k", None), getattr(r, "plain_rounds", None)
    if str(r.k) != "auto" or mean is None or mean != mean:
        return str(r.k)
    off = f", {plain:.0%} off" if plain == plain and plain else ""
    return f"auto ({mean:.1f}{off})"


def _f(v, fmt="{:.2f}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return fmt.format(v)


def mark(r) -> str:
    """† units stayed disturbed after re-measurement; ‡ disturbed units were re-measured."""
    if (getattr(r, "unclean_units", 0) or 0) > 0:
        return "†"
    if (getattr(r, "remeasured", 0) or 0) > 0:
        return "‡"
    return ""


def loop_mark(r) -> str:
    return "↻" if rests_on_loops(r) else ""


def _loaded(r, col: str):
    """At batch=B the batch runs' figure (aggregate throughput, its ratio), else the column."""
    batched = getattr(r, f"batch_{col}", None)
    return batched if batched is not None and batched == batched else getattr(r, col)


def _num(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def rests_on_loops(r) -> bool:
    """Some units loop and without them the speedup is another: below 1 where the cell's is at
    least 1, below the cell's 95% interval, or no loop-free unit left."""
    share = _num(getattr(r, "loop_share", None))
    if not share:
        return False
    free, whole = _num(getattr(r, "speedup_noloop", None)), _num(getattr(r, "speedup", None))
    low = _num(getattr(r, "speedup_ci_low", None))
    if free is None:
        return True
    return (whole is not None and free < 1 <= whole) or (low is not None and free < low)


# (header, the cell of a summary row): the console table, a column in one place
SUMMARY = [
    ("task", lambda r: str(r.task)),
    ("category", lambda r: "" if r.category == "all" else str(r.category)),
    ("method", lambda r: str(r.method) + (BOUND if is_bound(str(r.method)) else "")),
    ("k", k_label),
    ("T", lambda r: _f(r.temperature, "{:g}")),
    ("B", lambda r: str(getattr(r, "batch", 1))),
    ("prompts", lambda r: str(r.n_prompts)),
    ("tok/s", lambda r: _f(_loaded(r, "tokens_per_s"), "{:.1f}")),
    ("base tok/s", lambda r: _f(_loaded(r, "baseline_tokens_per_s"), "{:.1f}")),
    ("speedup", lambda r: _f(_loaded(r, "speedup"), "{:.2f}×") + mark(r) + loop_mark(r)),
    ("95% CI", lambda r: f"{_f(r.speedup_ci_low)}–{_f(r.speedup_ci_high)}"),
    ("decode", lambda r: _f(getattr(r, "decode_speedup", None), "{:.2f}×")),
    ("loops", lambda r: _f(getattr(r, "loop_share", None), "{:.0%}")),
    ("no-loop", lambda r: _f(getattr(r, "speedup_noloop", None), "{:.2f}×")),
    ("τ", lambda r: _f(r.tau)),
    ("τ/round", lambda r: _f(r.tau_round)),
    ("τ/drafted", lambda r: _f(getattr(r, "tau_drafted", None))),  # rounds that drafted
    ("α", lambda r: _f(r.acceptance_rate)),  # the rounds k=auto chose to draft
    ("α1 forced", lambda r: _f(getattr(r, "alpha1_forced", None))),  # every round drafting
    ("pred.", lambda r: _f(r.predicted_speedup, "{:.2f}×")),
    ("draft %", lambda r: _f(r.draft_overhead * 100, "{:.0f}")),
    ("d", lambda r: _f(getattr(r, "draft_step_cost", None), "{:.2f}")),
    ("mem MB", lambda r: _f(r.memory_overhead_mb, "{:.1f}")),
    ("TTFT ms", lambda r: _f(r.ttft_ms, "{:.0f}")),
    ("TPOT ms", lambda r: _f(r.tpot_ms, "{:.1f}")),
    ("exact", lambda r: _f(r.exact_match, "{:.2f}")),
    ("dist p", lambda r: _dist(r)),
]


def _dist(r) -> str:
    """check=distribution: its p-value, or `untested` (the method drafted under its floor)."""
    if getattr(r, "dist_status", None) == "untested":
        return "untested"
    return _f(r.dist_pvalue, "{:.3g}")


def _print(summary: pd.DataFrame, title: str, columns: list, left: tuple, console) -> None:
    t = Table(title=title, title_justify="left")
    for name, _ in columns:
        t.add_column(name, justify="left" if name in left else "right")
    for r in summary.itertuples():
        t.add_row(*(cell(r) for _, cell in columns))
    console.print(t)


def print_summary(summary: pd.DataFrame, title: str, console: Console | None = None) -> None:
    """The run's summary rows; at batch=B tok/s and the speedup are the batch runs' aggregate
    throughput (the CI is the per-sequence speedup's)."""
    console = console or Console()
    columns = SUMMARY if "batch" in summary and (summary.batch > 1).any() else [
        c for c in SUMMARY if c[0] != "B"
    ]  # fmt: skip
    _print(summary, title, columns, ("task", "category", "method"), console)
    rows = summary[summary.category == "all"] if "category" in summary else summary
    dist = (
        int(rows.disturbed_units.fillna(0).max()) if "disturbed_units" in rows and len(rows) else 0
    )
    unclean = (
        int(rows.unclean_units.fillna(0).max()) if "unclean_units" in rows and len(rows) else 0
    )
    if any(is_bound(str(m)) for m in summary.method):
        console.print(BOUND_NOTE)
    if dist or unclean:
        console.print(
            f"interference: {dist} unit(s) disturbed by other work on the machine, "
            f"re-measured; {unclean} still disturbed (†: read that speedup with care; "
            f"‡: cleaned by re-measurement). records.jsonl has the load samples."
        )
    looped = [f"{r.method} ({r.task})" for r in rows.itertuples() if rests_on_loops(r)]
    if looped:
        console.print(
            f"↻ the speedup rests on repetition loops (loops: share of units whose turn loops; "
            f"no-loop: the speedup without them): {', '.join(looped)}"
        )


def _errors(r) -> str:
    """A serving cell's failed requests by kind, and requests never started (the time ran out)."""
    errs = {e: getattr(r, f"errors_{e}") for e in ("connection", "timeout", "http", "protocol")}
    shown = ", ".join(f"{v} {e}" for e, v in errs.items() if v) or "0"
    late = r.not_started
    if isinstance(late, (int, float)) and late == late and late:
        shown += f", {int(late)} not started"
    return shown


SERVE = [
    ("task", lambda r: str(r.task)),
    ("method", lambda r: str(r.method)),
    ("k", lambda r: str(r.k)),
    ("T", lambda r: _f(r.temperature, "{:g}")),
    ("c", lambda r: str(r.concurrency)),
    ("prompts", lambda r: str(r.n_prompts)),
    ("req", lambda r: str(r.requests)),
    ("errors", _errors),
    ("tok/s", lambda r: _f(r.tokens_per_s, "{:.1f}")),
    ("base tok/s", lambda r: _f(r.baseline_tokens_per_s, "{:.1f}")),
    ("speedup", lambda r: _f(r.speedup, "{:.2f}×")),
    ("TTFT p50/p99 ms", lambda r: f"{_f(r.ttft_p50_ms, '{:.0f}')}/{_f(r.ttft_p99_ms, '{:.0f}')}"),
    ("TPOT p50/p99 ms", lambda r: f"{_f(r.tpot_p50_ms, '{:.1f}')}/{_f(r.tpot_p99_ms, '{:.1f}')}"),
    ("ITL p50/p99 ms", lambda r: f"{_f(r.itl_p50_ms, '{:.1f}')}/{_f(r.itl_p99_ms, '{:.1f}')}"),
    ("τ", lambda r: _f(r.tau)),
    ("α", lambda r: _f(r.acceptance_rate)),
    ("exact", lambda r: _f(r.exact_match, "{:.2f}")),
]


def print_serve_summary(summary: pd.DataFrame, title: str, console: Console | None = None) -> None:
    """backend=server: throughput, latency percentiles, server counters and every error."""
    _print(summary, title, SERVE, ("task", "method"), console or Console())
