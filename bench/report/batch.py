"""The report's in-process load section: cells run at batch=B (bench.run.batched).

    Batches    a row per (group, method, k, B): the method's and the baseline's aggregate
               tokens/s at the same B, the speedup, target rows per shared forward, τ, the
               per-sequence TPOT p50/p90 and greedy agreement; and per group a chart of the
               speedup against B per method and of the throughput against B for each method
               and for ar. A batch=1 cell of the same method joins its line (its tokens/s are
               Σ new ÷ Σ wall of its turns, and a batch run's time is the union of its turns'
               clocked intervals: the same quantity, bench.decode.batch) when it decoded the
               same prompts with the same budgets (`prompt_set`); a line holds one prompt set
               (its B > 1 cells' most common), the cells of another are named under the table
               and left off it.
Both sit in the report's "Under load" section: these first, then the server backend's
concurrency cells (bench/report/serve.py), each named apart.
"""

from __future__ import annotations

import pandas as pd

from bench.report import charts, tables
from bench.report.runs import slug
from bench.report.serve import _f, wide_rows

HEAD = ["method", "B", "tok/s", "ar tok/s", "speedup", "rows/forward", "τ", "TPOT p50 ms",
        "TPOT p90 ms", "exact"]  # fmt: skip


def batch_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """The task-wide row of every in-process run of a method that ran at some B > 1, with its
    throughput read the same way at every B."""
    if "batch" not in cells or not (cells.batch > 1).any():
        return cells.iloc[0:0]
    loaded = set(cells[cells.batch > 1].method)
    rows = tables.with_labels(wide_rows(cells[cells.method.isin(loaded)]))
    rows = rows[one_prompt_set(rows)]
    one = rows.batch == 1
    rows["tokens_per_s"] = rows.batch_tokens_per_s.where(~one, rows.tokens_per_s)
    rows["baseline_tokens_per_s"] = rows.batch_baseline_tokens_per_s.where(
        ~one, rows.baseline_tokens_per_s
    )
    rows["speedup"] = rows.tokens_per_s / rows.baseline_tokens_per_s
    return rows.sort_values(["group", "method", "batch"])


def one_prompt_set(rows: pd.DataFrame) -> pd.Series:
    """Per (group, method): the rows of the prompt set its B > 1 cells ran most (a B = 1 cell
    of other prompts or budgets would put unlike numbers on the line). Runs read without a
    prompt_set keep every row."""
    if "prompt_set" not in rows:
        return pd.Series(True, index=rows.index)
    keep = pd.Series(False, index=rows.index)
    for _, g in rows.groupby(["group", "method"], sort=False):
        loaded = g[g.batch > 1].prompt_set
        keep[g.index] = g.prompt_set == (loaded.mode().iloc[0] if len(loaded) else None)
    return keep


def left_off(cells: pd.DataFrame) -> list[str]:
    """The runs of a batch method that one_prompt_set leaves off its line, for a note."""
    if "batch" not in cells or not (cells.batch > 1).any():
        return []
    loaded = set(cells[cells.batch > 1].method)
    rows = wide_rows(cells[cells.method.isin(loaded)])
    return [f"{r.method} B={int(r.batch)} ({r.prompt_set})"
            for _, r in rows[~one_prompt_set(rows)].iterrows()]  # fmt: skip


def batch_section(w, cells: pd.DataFrame) -> None:
    """Append the section (nothing when no cell ran at batch > 1)."""
    rows = batch_rows(cells)
    if rows.empty:
        return
    w.add(
        '<a id="batches"></a>',
        "",
        "### In-process batches (`batch=B`)",
        "",
        "Cells of `batch=B`: B conversations decoded together in our engine (continuous "
        "batching in prompt order; one target forward a round over every sequence's rows), the "
        "baseline `ar` at the same B on the same conversations, the two sides' batch runs "
        "interleaved. tok/s is Σ new tokens ÷ Σ time of a side's batch runs (the time some "
        "sequence was inside its turn's clock; at B = 1 the Σ of the turns' wall); the speedup "
        "is their ratio; TPOT is per sequence, its latency under the batch's load.",
        "",
    )
    table = [
        [r.label, int(r.batch), _f(r.tokens_per_s, "{:.1f}"),
         _f(r.baseline_tokens_per_s, "{:.1f}"), _f(r.speedup, "{:.2f}×"),
         _f(r.get("rows_per_forward"), "{:.1f}"), _f(r.get("tau"), "{:.2f}"),
         _f(r.get("tpot_p50_ms"), "{:.1f}"), _f(r.get("tpot_p90_ms"), "{:.1f}"),
         _f(r.get("exact_match"), "{:.2f}")]
        for _, r in rows.iterrows()
    ]  # fmt: skip
    w.csv(rows, "batches.csv")
    w.add(tables.markdown_table(HEAD, table), "")
    if off := left_off(cells):
        w.add("Left off these lines (other prompts or budgets than the line's): "
              + "; ".join(off) + ".", "")  # fmt: skip
    for group, g in rows.groupby("group", sort=False):
        w.add(f"#### {group}", "")
        w.chart(
            charts.batch_lines,
            g[["method", "batch", "speedup", "tokens_per_s", "baseline_tokens_per_s"]],
            f"batch__{slug(group)}.png",
            "speedup and throughput against B",
            title="Speculation under load: speedup and throughput against B",
            subtitle=group,
        )
