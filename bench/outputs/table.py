"""The human-readable summary: a rich table over summary.csv rows.

A speedup marked † comes from a cell with units that stayed disturbed after re-measurement
(unclean_units > 0: read it with care); ‡ marks cells where disturbed units were re-measured
and cleaned. The footer says how many of each.
"""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table


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


def print_summary(summary: pd.DataFrame, title: str, console: Console | None = None) -> None:
    console = console or Console()
    t = Table(title=title, title_justify="left")
    for col in (
        "task",
        "category",
        "method",
        "k",
        "T",
        "prompts",
        "tok/s",
        "base tok/s",
        "speedup",
        "95% CI",
        "τ",
        "τ/round",
        "α",
        "pred.",
        "draft %",
        "d",
        "mem MB",
        "TTFT ms",
        "TPOT ms",
        "exact",
        "dist p",
    ):
        t.add_column(col, justify="left" if col in ("task", "category", "method") else "right")
    for r in summary.itertuples():
        t.add_row(
            str(r.task),
            "" if r.category == "all" else str(r.category),
            str(r.method),
            k_label(r),
            _f(r.temperature, "{:g}"),
            str(r.n_prompts),
            _f(r.tokens_per_s, "{:.1f}"),
            _f(r.baseline_tokens_per_s, "{:.1f}"),
            _f(r.speedup, "{:.2f}×") + mark(r),
            f"{_f(r.speedup_ci_low)}–{_f(r.speedup_ci_high)}",
            _f(r.tau),
            _f(r.tau_round),
            _f(r.acceptance_rate),
            _f(r.predicted_speedup, "{:.2f}×"),
            _f(r.draft_overhead * 100, "{:.0f}"),
            _f(getattr(r, "draft_step_cost", None), "{:.2f}"),
            _f(r.memory_overhead_mb, "{:.1f}"),
            _f(r.ttft_ms, "{:.0f}"),
            _f(r.tpot_ms, "{:.1f}"),
            _f(r.exact_match, "{:.2f}"),
            _f(r.dist_pvalue, "{:.3g}"),
        )
    console.print(t)
    rows = summary[summary.category == "all"] if "category" in summary else summary
    dist = (
        int(rows.disturbed_units.fillna(0).max()) if "disturbed_units" in rows and len(rows) else 0
    )
    unclean = (
        int(rows.unclean_units.fillna(0).max()) if "unclean_units" in rows and len(rows) else 0
    )
    if dist or unclean:
        console.print(
            f"interference: {dist} unit(s) disturbed by other work on the machine, "
            f"re-measured; {unclean} still disturbed (†: read that speedup with care; "
            f"‡: cleaned by re-measurement). records.jsonl has the load samples."
        )


def _errors(r) -> str:
    """A serving cell's failed requests by kind, and requests never started (the time ran out)."""
    errs = {e: getattr(r, f"errors_{e}") for e in ("connection", "timeout", "http", "protocol")}
    shown = ", ".join(f"{v} {e}" for e, v in errs.items() if v) or "0"
    late = r.not_started
    if isinstance(late, (int, float)) and late == late and late:
        shown += f", {int(late)} not started"
    return shown


def print_serve_summary(summary: pd.DataFrame, title: str, console: Console | None = None) -> None:
    """backend=server: throughput, latency percentiles, server counters and every error."""
    console = console or Console()
    t = Table(title=title, title_justify="left")
    for col in (
        "task",
        "method",
        "k",
        "T",
        "c",
        "prompts",
        "req",
        "errors",
        "tok/s",
        "base tok/s",
        "speedup",
        "TTFT p50/p99 ms",
        "TPOT p50/p99 ms",
        "ITL p50/p99 ms",
        "τ",
        "α",
        "exact",
    ):
        t.add_column(col, justify="left" if col in ("task", "method") else "right")
    for r in summary.itertuples():
        t.add_row(
            str(r.task),
            str(r.method),
            str(r.k),
            _f(r.temperature, "{:g}"),
            str(r.concurrency),
            str(r.n_prompts),
            str(r.requests),
            _errors(r),
            _f(r.tokens_per_s, "{:.1f}"),
            _f(r.baseline_tokens_per_s, "{:.1f}"),
            _f(r.speedup, "{:.2f}×"),
            f"{_f(r.ttft_p50_ms, '{:.0f}')}/{_f(r.ttft_p99_ms, '{:.0f}')}",
            f"{_f(r.tpot_p50_ms, '{:.1f}')}/{_f(r.tpot_p99_ms, '{:.1f}')}",
            f"{_f(r.itl_p50_ms, '{:.1f}')}/{_f(r.itl_p99_ms, '{:.1f}')}",
            _f(r.tau),
            _f(r.acceptance_rate),
            _f(r.exact_match, "{:.2f}"),
        )
    console.print(t)
