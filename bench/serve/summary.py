"""The summary rows of a server cell: what summary.csv holds for backend=server.

Per task (and task=all when several ran), from the successful requests of every repeat:
    ttft/tpot/itl p50, p90, p99  per-request TTFT and TPOT; ITL pooled over all text chunks
    request_tok_s                median over requests of new tokens ÷ (end − send)
    exact_match                  greedy: fraction of prompts whose every turn's text from the
                                 speculative server equals the plain server's (repeat 0)
    requests, errors_*           every request sent, and its failures by kind (never dropped)
On the cell-wide row (task=all, or the one task), from passes.jsonl:
    tokens_per_s                 throughput: Σ new tokens ÷ pass wall time (first send → last
                                 reply), median over repeats; baseline_tokens_per_s the same
                                 for the plain server, speedup their ratio
    tau, tau_round, tau_nonempty, acceptance_rate, alpha_marginal, accept_length_window
                                          from the server's own counters (bench/serve/scrape.py)
    not_started                  conversations the pass's time bound kept from starting
The in-process columns that a server cannot report (draft overhead, memory, phase times) are
empty, so summary.csv keeps one column set across engines (bench.outputs.metrics.COLUMNS first).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from bench.outputs.metrics import COLUMNS, verdict_summary
from bench.serve.scrape import speculation

PCTS = (50, 90, 99)
ERRORS = ("connection", "timeout", "http", "protocol")
EXTRA = (
    ["server", "concurrency", "request_rate", "requests", "not_started"]
    + [f"errors_{e}" for e in ERRORS]
    + [f"{m}_p{p}_ms" for m in ("ttft", "tpot", "itl") for p in PCTS]
    + ["baseline_ttft_p50_ms", "baseline_tpot_p50_ms", "request_tok_s", "baseline_request_tok_s"]
    + ["tau_nonempty", "accept_length_window"]  # vLLM's and SGLang's own τ variants
)
# a server cell's per-request percentiles share the in-process batch cells' columns
# (tpot_p50_ms, tpot_p90_ms: the same quantity, each sequence's time per output token)
SERVE_COLUMNS = COLUMNS + [c for c in EXTRA if c not in COLUMNS]


def pct(values, p) -> float | None:
    v = [x for x in values if x is not None and not (isinstance(x, float) and np.isnan(x))]
    return float(np.percentile(v, p) * 1e3) if v else None


def error_counts(recs: pd.DataFrame) -> dict:
    kinds = recs.error.dropna().astype(str)
    return {f"errors_{e}": int(kinds.str.startswith(e).sum()) for e in ERRORS}


def exact_match(method: pd.DataFrame) -> tuple[float | None, int]:
    """Greedy verdicts of every repeat (bench.outputs.metrics.verdict_summary)."""
    exact, _, mismatches = verdict_summary(method)
    return exact, mismatches


def task_row(method: pd.DataFrame, base: pd.DataFrame) -> dict:
    ok, bok = method[method.error.isna()], base[base.error.isna()]
    row = {
        "n_prompts": int(method[["task", "prompt_id"]].drop_duplicates().shape[0]),
        "new_tokens": int(ok.new_tokens.sum()),
        "requests": int(len(method)),
        **error_counts(method),
    }
    for m, col in (("ttft", "ttft_s"), ("tpot", "tpot_s")):
        for p in PCTS:
            row[f"{m}_p{p}_ms"] = pct(ok[col], p)
        row[f"baseline_{m}_p50_ms"] = pct(bok[col], 50)
    itl = [x for lst in ok.itl_s for x in (lst or [])]
    for p in PCTS:
        row[f"itl_p{p}_ms"] = pct(itl, p)
    row["ttft_ms"], row["tpot_ms"] = row["ttft_p50_ms"], row["tpot_p50_ms"]
    rate = lambda d: float((d.new_tokens / d.wall_s).median()) if len(d) else None  # noqa: E731
    row["request_tok_s"], row["baseline_request_tok_s"] = rate(ok), rate(bok)
    greedy = float(method.temperature.iloc[0]) == 0
    exact, mism = exact_match(method) if greedy else (None, None)
    row["exact_match"], row["mismatches"] = exact, mism
    return row


def cell_row(passes: list[dict]) -> dict:
    """Throughput, speculation and start bounds from the cell's passes."""

    def med(role: str, key: str) -> float | None:
        vals = [p[key] for p in passes if p["role"] == role and p[key] is not None]
        return float(np.median(vals)) if vals else None

    tps, btps = med("method", "throughput_tok_s"), med("baseline", "throughput_tok_s")
    spec = [p for p in passes if p["role"] == "method"]
    delta = _sum_deltas([p["counters"] for p in spec])
    requests = sum(p["requests"] for p in spec) if all("requests" in p for p in spec) else None
    s = speculation(delta, sum(p["new_tokens"] for p in spec), requests) if delta else {}
    return {
        "tokens_per_s": tps,
        "baseline_tokens_per_s": btps,
        "speedup": tps / btps if tps and btps else None,
        "tau": s.get("tau"),
        "tau_round": s.get("tau_round"),
        "tau_nonempty": s.get("tau_nonempty"),
        "accept_length_window": s.get("accept_length_window"),
        "acceptance_rate": s.get("acceptance_rate"),
        "alpha_marginal": json.dumps(s["alpha_marginal"]) if s.get("alpha_marginal") else None,
        "not_started": sum(p["not_started"] for p in passes),
    }


def _sum_deltas(deltas: list[dict]) -> dict:
    out: dict = {}
    for d in deltas:
        for k, v in (d or {}).items():
            if isinstance(v, list):
                cur = out.setdefault(k, [])
                cur.extend([0] * (len(v) - len(cur)))
                for i, x in enumerate(v):
                    cur[i] += x
            else:
                out[k] = out.get(k, 0) + v
    return out


def summarize(records: pd.DataFrame, passes: list[dict], ident: dict) -> pd.DataFrame:
    """summary.csv rows of one cell; `ident` holds the KEYS and server columns."""
    method = records[records.role == "method"]
    base = records[records.role == "baseline"]
    tasks = sorted(method.task.unique())
    scopes = [(t, method.task == t, base.task == t) for t in tasks]
    if len(tasks) > 1:
        scopes.append(("all", method.task.notna(), base.task.notna()))
    wide = scopes[-1][0]
    rows = []
    for task, mm, bm in scopes:
        row = dict(ident, task=task)
        row.update(task_row(method[mm], base[bm]))
        row["not_started"] = None
        if task == wide:
            row.update(cell_row(passes))
        rows.append(row)
    return pd.DataFrame(rows, columns=SERVE_COLUMNS)[SERVE_COLUMNS]
