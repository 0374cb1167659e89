"""The report's tables: tidy DataFrames behind every chart, and their Markdown rendering.

Inputs are `bench.report.runs` cells (one row per summary.csv row, with group and τ interval) and
records. Each function here takes one group's rows (one model, device and dtype) unless its
name says otherwise, and returns a DataFrame that the report writes as CSV and a chart draws.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from bench.outputs.acceptance import tau_round_of
from bench.outputs.metrics import ci
from bench.outputs.table import BOUND
from bench.outputs.table import mark as interference_mark
from bench.report.charts import config_label
from methods.registry import is_bound

PHASES = ["prefill", "draft", "verify", "other"]


def with_labels(cells: pd.DataFrame) -> pd.DataFrame:
    """`label` for every row ('ngram k=8'), a bound (oracle) marked as one: 'oracle k=4
    (bound)'."""
    out = cells.copy()
    auto = out.k_auto.fillna(False).astype(bool) if "k_auto" in out else [False] * len(out)
    out["label"] = [
        config_label(m, k, a) + (BOUND if is_bound(str(m)) else "")
        for m, k, a in zip(out.method, out.k, auto)
    ]
    return out


def task_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """Rows of whole tasks (category 'all'); older runs have no category column."""
    if "category" not in cells:
        return cells
    return cells[cells.category.fillna("all") == "all"]


def overall(cells: pd.DataFrame) -> pd.DataFrame:
    """Per run config, the task='all' row when there is one, else its single task's row."""
    cells = task_rows(cells)
    if cells.empty:
        return cells
    keys = ["method", "k", "temperature", "run"]
    rows = []
    for _, g in cells.groupby(keys, dropna=False, sort=False):
        rows.append(g[g.task == "all"].iloc[0] if (g.task == "all").any() else g.iloc[0])
    return pd.DataFrame(rows).reset_index(drop=True)


def config_order(df: pd.DataFrame) -> pd.DataFrame:
    """Sort rows: temperature, then ar/baseline first, then method name, then k."""
    key = df.method.map(lambda m: (m not in ("ar", "baseline"), m))
    return (
        df.assign(_key=key)
        .sort_values(["temperature", "_key", "k"], na_position="first")
        .drop(columns="_key")
    )


def lowest_temperature(cells: pd.DataFrame) -> pd.DataFrame:
    """The rows at the group's lowest temperature (T = 0 when greedy runs exist)."""
    t = cells.temperature.dropna()
    return cells if t.empty else cells[cells.temperature == t.min()]


# --- leaderboard ---
def leaderboard(cells: pd.DataFrame) -> pd.DataFrame:
    """Long table: a row per method config × task (overall included): speedup, τ, intervals.
    A question file (one task spanning categories) is reported per category, Spec-Bench's way:
    its categories are the columns and the task row is the overall."""
    cols = [
        "label",
        "method",
        "k",
        "temperature",
        "task",
        "n_prompts",
        *ci("speedup"),
        *ci("tau_round"),
        "tokens_per_s",
        "baseline_tokens_per_s",
        "mark",
        "bound",
        "run",
    ]
    df = with_labels(cells)
    df["mark"] = [interference_mark(r) for r in df.itertuples()]
    df["bound"] = [is_bound(str(m)) for m in df.method]  # a ceiling (oracle), not a method
    whole = task_rows(df)
    if "category" in df and whole.task.nunique() == 1 and (df.category != "all").any():
        per = df[df.category != "all"].assign(task=lambda d: d.category)
        parts = [per]
    else:
        parts = [whole[whole.task != "all"]]
    o = overall(df).assign(task="overall")
    parts.append(o)
    return config_order(pd.concat(parts, ignore_index=True)[cols])


def _interval(v, lo, hi, unit="", digits=2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    s = f"{v:.{digits}f}{unit}"
    if lo is None or hi is None or any(isinstance(x, float) and math.isnan(x) for x in (lo, hi)):
        return s
    if round(lo, digits) == round(hi, digits):  # one unit, or identical units: no interval
        return s
    return f"{s} ({lo:.{digits}f}–{hi:.{digits}f})"


def leaderboard_markdown(board: pd.DataFrame, metric: str) -> str:
    """Spec-Bench's shape: a row per method config, a column per task, then overall."""
    tasks = [t for t in sorted(board.task.unique()) if t != "overall"] + ["overall"]
    unit = "×" if metric == "speedup" else ""
    rows = []
    for (label, temp), g in board.groupby(["label", "temperature"], sort=False, dropna=False):
        g = g.set_index("task")
        cells = [label, _num(temp, "{:g}")]
        for t in tasks:
            if t in g.index:
                r = g.loc[t]
                mark = r["mark"] if metric == "speedup" and isinstance(r["mark"], str) else ""
                cells.append(
                    _interval(r[metric], r[f"{metric}_ci_low"], r[f"{metric}_ci_high"], unit) + mark
                )
            else:
                cells.append("–")
        rows.append(cells)
    head = ["method", "T"] + [f"**{t}**" if t == "overall" else t for t in tasks]
    return markdown_table(head, rows)


# --- sweeps ---
def k_sweep(cells: pd.DataFrame) -> pd.DataFrame:
    """Overall rows at the lowest temperature of methods run at two or more values of k (a
    k=auto row counts as one, placed at its mean chosen k)."""
    df = with_labels(overall(lowest_temperature(cells)))
    auto = df.k_auto.fillna(False).astype(bool) if "k_auto" in df else df.k.isna() & False
    if "mean_k" in df and auto.any():
        df.loc[auto, "k"] = pd.to_numeric(df.loc[auto, "mean_k"], errors="coerce")
    df = df[df.k.notna() & ((df.k > 0) | auto)]
    many = df.groupby("method").label.nunique()
    df = df[df.method.isin(many[many >= 2].index)]
    return _sweep_cols(df.sort_values(["method", "k"]))


def temperature_sweep(cells: pd.DataFrame) -> pd.DataFrame:
    """Overall rows of method configs (method, k) run at two or more temperatures."""
    df = with_labels(overall(cells))
    df = df[df.temperature.notna()]
    many = df.groupby("label").temperature.nunique()
    df = df[df.label.isin(many[many >= 2].index)]
    return _sweep_cols(df.sort_values(["label", "temperature"]))


def _sweep_cols(df: pd.DataFrame) -> pd.DataFrame:
    extra = ["k_auto"] if "k_auto" in df else []
    return df[
        extra
        + [
            "label",
            "method",
            "k",
            "temperature",
            *ci("speedup"),
            *ci("tau_round"),
            "acceptance_rate",
            "run",
        ]
    ]


def alpha_table(cells: pd.DataFrame) -> pd.DataFrame:
    """α_i per draft position from the overall rows at the lowest temperature."""
    rows = []
    for r in with_labels(overall(lowest_temperature(cells))).itertuples():
        raw = r.alpha_per_pos if isinstance(r.alpha_per_pos, str) else "[]"
        for i, a in enumerate(json.loads(raw), 1):
            if a is not None:
                rows.append(
                    {
                        "label": r.label,
                        "method": r.method,
                        "k": r.k,
                        "position": i,
                        "alpha": float(a),
                    }
                )
    return pd.DataFrame(rows, columns=["label", "method", "k", "position", "alpha"])


COST_MODEL = [
    "label",
    "method",
    "k",
    "tau_round",
    "predicted_speedup",
    "speedup",
    "draft_overhead",
    "draft_step_cost",
    "run",
]


def cost_model(cells: pd.DataFrame) -> pd.DataFrame:
    """Overall rows at the lowest temperature: measured speedup next to the cost model's
    prediction τ_round ÷ ((c(w) + draft time per round) ÷ c(1)), what limits the method, and d
    (one drafter step ÷ one target forward)."""
    df = with_labels(overall(lowest_temperature(cells)))
    if "predicted_speedup" not in df:
        return pd.DataFrame(columns=COST_MODEL)
    df = df[df.predicted_speedup.notna() & (df.method != "ar")]
    return config_order(df).reindex(columns=COST_MODEL)  # older summaries lack some: empty


def subcategory_detail(records: pd.DataFrame) -> pd.DataFrame:
    """Per method config and sub-category (MT-Bench's eight): median unit speedup and τ, from
    records, where a category holds several sub-categories."""
    cols = ["label", "method", "k", "category", "subcategory", "units", "speedup", "tau_round"]
    if records.empty or "subcategory" not in records:
        return pd.DataFrame(columns=cols)
    rec = records[records.subcategory.fillna("") != ""]
    if rec.empty or rec.groupby("category").subcategory.nunique().max() < 2:
        return pd.DataFrame(columns=cols)
    rows = []
    unit = ["task", "prompt_id", "turn", "repeat"]
    for (method, k, cat, sub), g in rec.groupby(
        ["method", "k", "category", "subcategory"], dropna=False
    ):
        m, b = g[g.role == "method"], g[g.role == "baseline"]
        pairs = m.merge(b, on=unit, suffixes=("_m", "_b"))
        if pairs.empty:
            continue
        ratio = (pairs.new_tokens_m / pairs.wall_s_m) / (pairs.new_tokens_b / pairs.wall_s_b)
        m0 = m[m.repeat == 0]
        rows.append(
            {
                "method": method,
                "k": k,
                "category": cat,
                "subcategory": sub,
                "units": int(pairs.groupby(unit[:3]).ngroups),
                "speedup": float(ratio.median()),
                "tau_round": tau_round_of(m0),
            }
        )
    return with_labels(pd.DataFrame(rows))[cols] if rows else pd.DataFrame(columns=cols)


# --- time and memory ---
def time_breakdown(records: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Mean share of wall time per phase, per method config, at the lowest temperature.

    Method turns come from role=method rows; `ar` also from every baseline row (the baseline is
    ar on the same loop), so ar appears even when no run had method=ar."""
    if records.empty:
        return pd.DataFrame(columns=["label", "method", "k", *PHASES, "ms_per_token", "turns"])
    temps = lowest_temperature(cells).temperature.dropna()
    rec = records if temps.empty else records[records.temperature == temps.min()]
    rec = rec.copy()
    base = rec.role == "baseline"
    ran = rec["method_run"] if "method_run" in rec else pd.Series("ar", index=rec.index)
    rec.loc[base, "method"], rec.loc[base, "k"] = ran[base].fillna("ar"), 0  # ar, or hf_ar
    rec = with_labels(rec[rec.wall_s > 0])
    rows = []
    for label, g in rec.groupby("label", sort=False):
        row = {"label": label, "method": g.method.iloc[0], "k": g.k.iloc[0]}
        for p in PHASES:
            row[p] = float((g[f"{p}_s"] / g.wall_s).mean())
        row["ms_per_token"] = float(g.wall_s.sum() / g.new_tokens.sum() * 1e3)
        row["turns"] = len(g)
        rows.append(row)
    df = pd.DataFrame(rows)
    df["temperature"] = 0.0
    return config_order(df).drop(columns="temperature")


def memory_table(cells: pd.DataFrame) -> pd.DataFrame:
    df = with_labels(overall(lowest_temperature(cells)))
    df = df[df.memory_overhead_mb.notna()]
    return config_order(df)[["label", "method", "k", "temperature", "memory_overhead_mb", "run"]]


# --- devices ---
def device_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Overall rows at T = lowest, for (model, dtype) measured on two or more devices."""
    df = with_labels(overall(lowest_temperature(cells[cells.source == "specsweep"])))
    n_dev = df.groupby(["model", "dtype"]).device_name.nunique()
    multi = n_dev[n_dev >= 2].index
    df = df[[(m, d) in set(multi) for m, d in zip(df.model, df.dtype)]]
    return config_order(df)[
        [
            "model",
            "dtype",
            "device_name",
            "label",
            "method",
            "k",
            "temperature",
            *ci("speedup"),
            "tokens_per_s",
            "tau_round",
            "run",
        ]
    ]


# --- losslessness ---
def lossless_table(cells: pd.DataFrame) -> pd.DataFrame:
    df = with_labels(cells[cells.source == "specsweep"])
    df = config_order(df)
    return df.reindex(  # summaries written before dist_status lack it
        columns=[
            "group",
            "label",
            "method",
            "k",
            "temperature",
            "task",
            "n_prompts",
            "exact_match",
            "near_ties",
            "mismatches",
            "dist_pvalue",
            "dist_status",
            "run",
        ]
    )


def divergences(records: pd.DataFrame) -> pd.DataFrame:
    """Every greedy divergence (mismatch or near-tie) of a method, on every repeat (a bug that
    shows on repeat 1 only is listed too); a later turn's comes from its re-decode on the
    baseline's history (bench.outputs.verdict)."""
    cols = [
        "group",
        "label",
        "task",
        "prompt_id",
        "repeat",
        "turn",
        "verdict",
        "first_divergence",
        "logit_gap",
        "method_gap",
        "run",
    ]
    if records.empty or "verdict" not in records:
        return pd.DataFrame(columns=cols)
    r = records[(records.role == "method") & records.verdict.isin(["mismatch", "near-tie"])]
    return with_labels(r)[cols] if len(r) else pd.DataFrame(columns=cols)


# --- Markdown ---
def _num(v, fmt="{:.2f}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "–"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def markdown_table(head: list[str], rows: list[list]) -> str:
    esc = [[str(c).replace("|", "\\|") for c in r] for r in rows]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(lines)


def lossless_markdown(df: pd.DataFrame) -> str:
    """One group's cells as a matrix: a row per method config, a column per task (overall last).

    T = 0: exact_match, with near-tie and mismatch counts when there are any.
    T > 0: the distribution check's p-value, 'untested' (it ran, but the method drafted too
    little in it), or 'not checked'."""
    tasks = [t for t in sorted(df.task.unique()) if t != "all"] + (
        ["all"] if (df.task == "all").any() else []
    )
    rows = []
    for (label, temp), g in df.groupby(["label", "temperature"], sort=False, dropna=False):
        g = g.set_index("task")
        row = [label, _num(temp, "{:g}")]
        for t in tasks:
            row.append(_lossless_cell(g.loc[t]) if t in g.index else "–")
        rows.append(row)
    head = ["method", "T"] + ["**overall**" if t == "all" else t for t in tasks]
    return markdown_table(head, rows)


def _lossless_cell(r) -> str:
    if r.temperature == 0:
        s = _num(r.exact_match)
        extra = [
            f"{int(n)} {what if n == 1 else plural}"
            for n, what, plural in (
                (r.near_ties, "near-tie", "near-ties"),
                (r.mismatches, "mismatch", "mismatches"),
            )
            if n is not None and n == n and n > 0
        ]
        return s + (f" ({', '.join(extra)})" if extra else "")
    if r.dist_pvalue == r.dist_pvalue and r.dist_pvalue is not None:
        return f"p = {r.dist_pvalue:.3g}"
    return "untested" if getattr(r, "dist_status", None) == "untested" else "not checked"


def divergence_markdown(df: pd.DataFrame) -> str:
    rows = [
        [
            r.group,
            r.label,
            r.task,
            str(r.prompt_id),
            _num(r.repeat, "{}"),
            _num(r.turn, "{}"),
            r.verdict,
            _num(r.first_divergence, "{:.0f}"),
            _num(r.logit_gap, "{:.4f}"),
            _num(r.method_gap, "{:.4f}"),
        ]
        for r in df.itertuples()
    ]
    return markdown_table(
        [
            "group",
            "method",
            "task",
            "prompt",
            "repeat",
            "turn",
            "verdict",
            "first divergence (token)",
            "logit gap (top-1 − top-2)",
            "method gap",
        ],
        rows,
    )
