"""The report's server section: backend=server cells, and one head in two engines side by side.

    Servers                     a row per cell (server, method, k, concurrency or request rate):
                                throughput of the speculative and the plain server, speedup,
                                TTFT/TPOT/ITL p50 and p99, τ and α from the server's counters,
                                greedy agreement, requests and every error
    Same drafter, two engines   a method that ran both in-process (our engine) and on a server
                                (e.g. our shipped EAGLE-3 head in vLLM): τ and α per position
                                side by side, so a user sees whether a head's numbers carry over
                                to the engine they deploy
Cells are the task-wide rows (task=all, or the one task), the only ones carrying throughput and
the server's counters (bench/serve/summary.py).
"""

from __future__ import annotations

import json
import math

import pandas as pd

from bench.report import tables


def is_server(cells: pd.DataFrame) -> pd.Series:
    if "engine" not in cells:
        return pd.Series(False, index=cells.index)
    return cells.engine.astype(str).str.startswith("openai/")


def _has(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _f(v, fmt="{:.2f}") -> str:
    return fmt.format(v) if _has(v) else "–"


def _alpha(v) -> str:
    if not isinstance(v, str) or not v.strip():
        return "–"
    vals = json.loads(v)
    return " / ".join("–" if a is None else f"{a:.2f}" for a in vals) if vals else "–"


def wide_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """Each run's task-wide row: the one carrying throughput (server cells), else task=all or
    the run's only task."""
    out = []
    for _, g in cells.groupby("run", sort=False):
        row = g[g.task == "all"] if (g.task == "all").any() else g.tail(1)
        out.append(row)
    return pd.concat(out, ignore_index=True) if out else cells.iloc[0:0]


SERVER_HEAD = [
    "server",
    "method",
    "k",
    "T",
    "concurrency",
    "rate",
    "tokens/s",
    "plain tokens/s",
    "speedup",
    "TTFT p50/p99 ms",
    "TPOT p50/p99 ms",
    "ITL p50/p99 ms",
    "τ_round",
    "vLLM mean acceptance length",
    "SGLang accept length (window)",
    "α marginal per position",
    "exact",
    "requests",
    "errors",
]


def server_table(serve: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, r in wide_rows(serve).sort_values(["server", "method", "concurrency"]).iterrows():
        errors = sum(
            int(r.get(f"errors_{e}") or 0) for e in ("connection", "timeout", "http", "protocol")
        )
        rows.append(
            [
                r.server,
                r.method,
                _f(r.k, "{:g}"),
                _f(r.temperature, "{:g}"),
                int(r.concurrency),
                _f(r.request_rate, "{:g}/s"),
                _f(r.tokens_per_s, "{:.1f}"),
                _f(r.baseline_tokens_per_s, "{:.1f}"),
                _f(r.speedup, "{:.2f}×"),
                f"{_f(r.ttft_p50_ms, '{:.0f}')}/{_f(r.ttft_p99_ms, '{:.0f}')}",
                f"{_f(r.tpot_p50_ms, '{:.1f}')}/{_f(r.tpot_p99_ms, '{:.1f}')}",
                f"{_f(r.itl_p50_ms, '{:.1f}')}/{_f(r.itl_p99_ms, '{:.1f}')}",
                _f(r.get("tau_round")),
                _f(r.get("tau_nonempty")),
                _f(r.get("accept_length_window")),
                _alpha(r.get("alpha_marginal")),
                _f(r.exact_match),
                int(r.requests),
                errors,
            ]
        )
    return pd.DataFrame(rows, columns=SERVER_HEAD)


PAIR_HEAD = [
    "method",
    "k",
    "task",
    "engine (ours)",
    "τ_round ours",
    "τ_round server",
    "server",
    "α marginal per position, ours",
    "α marginal per position, server",
]


def pairs_table(ours: pd.DataFrame, serve: pd.DataFrame) -> pd.DataFrame:
    """Methods measured both in-process and on a server, same task set and temperature."""
    rows = []
    mine = wide_rows(ours) if len(ours) else ours
    for _, s in wide_rows(serve).iterrows():
        if not _has(s.get("tau_round")):
            continue
        match = (
            mine[
                (mine.method == s.method)
                & (mine.task == s.task)
                & (mine.temperature == s.temperature)
                & (pd.to_numeric(mine.k, errors="coerce") == pd.to_numeric(s.k, errors="coerce"))
            ]
            if len(mine)
            else mine
        )
        for _, o in match.iterrows():
            rows.append(
                [
                    s.method,
                    _f(s.k, "{:g}"),
                    s.task,
                    o.dtype,
                    _f(o.tau_round),
                    _f(s.tau_round),
                    f"{s.server} (c={int(s.concurrency)})",
                    _alpha(o.get("alpha_marginal")),
                    _alpha(s.get("alpha_marginal")),
                ]
            )
    return pd.DataFrame(rows, columns=PAIR_HEAD)


def server_section(w, cells: pd.DataFrame) -> None:
    """Append the section (nothing when no server cell is among `cells`)."""
    mask = is_server(cells)
    if not mask.any():
        return
    serve, ours = cells[mask], cells[~mask]
    w.add(
        '<a id="servers"></a>',
        "",
        "### Servers (`backend=server`, at a concurrency)",
        "",
        "Cells of `backend=server`: the suite started the plain and the speculative server in "
        "turn on the same prompts. Throughput is Σ new tokens ÷ pass wall time at the cell's "
        "concurrency (median over repeats); TTFT/TPOT are per request, ITL per streamed "
        "chunk; τ and α come from the server's own counters (bench/serve/scrape.py).",
        "",
    )
    table = server_table(serve)
    w.csv(table, "servers.csv")
    w.add(tables.markdown_table(SERVER_HEAD, table.values.tolist()), "")
    pairs = pairs_table(ours, serve)
    w.add("#### Same drafter, two engines", "")
    if pairs.empty:
        w.add("No method ran both in-process and on a server over the same tasks.", "")
        return
    w.csv(pairs, "same_drafter.csv")
    w.add(
        "τ and acceptance per draft position of one drafter in our engine and in the "
        "server (in-process τ counts the prefill forward, as the server-derived τ does).",
        "",
        tables.markdown_table(PAIR_HEAD, pairs.values.tolist()),
        "",
    )
