"""One group's section of the report (a model × device × dtype): one function per subsection.

    x = Group.of(w, name, cells, records)
    for section in SECTIONS: section(x)

Each function writes its `###` subsection (Markdown, CSV, chart) through the report's Writer.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bench.outputs.metrics import ci
from bench.outputs.table import BOUND_NOTE
from bench.report import charts, tables
from bench.report.runs import slug


def settings_note(g: pd.DataFrame) -> str:
    settings = sorted(g.settings.unique())
    if len(settings) == 1:
        return f"Settings: {settings[0]}."
    return (
        "**Mixed settings**: rows in this group come from runs with different prompt sets "
        "or lengths (" + "; ".join(settings) + "); compare rows with care."
    )


@dataclass
class Group:
    w: object  # bench.report.writer.Writer
    name: str
    g: pd.DataFrame  # the group's cells
    recs: pd.DataFrame  # the group's records
    s: str  # the group's slug (file names, anchors)
    caption: str
    imported: bool  # Spec-Bench answer files, not our runs
    sub: str  # chart subtitle: the group and the lowest temperature shown

    @classmethod
    def of(cls, w, group: str, g: pd.DataFrame, recs: pd.DataFrame) -> Group:
        first = g.iloc[0]
        runs = g.run.nunique()
        imported = first["source"] != "specsweep"
        what = "answer file" if imported else "run"
        caption = (
            f"model **{first['model']}** · device **{first['device_name']}** · dtype "
            f"**{first['dtype']}** · {runs} {what}{'s' if runs != 1 else ''}"
        )
        temp = tables.lowest_temperature(g).temperature.dropna()
        sub = f"{group} · T={temp.min():g}" if len(temp) else group
        return cls(w, group, g, recs, slug(group), caption, imported, sub)


def header(x: Group) -> None:
    note = x.caption + ". " + settings_note(x.g)
    x.w.add(f'<a id="{x.s}"></a>', "", f"## {x.name}", "", note, "")


def leaderboard(x: Group) -> None:
    """The leaderboard: speedup and τ per method config, with intervals."""
    w, g, s, caption, imported = x.w, x.g, x.s, x.caption, x.imported
    board = tables.leaderboard(g)
    w.csv(board, f"leaderboard__{s}.csv")
    base = (
        "the named Spec-Bench baseline file's, over the questions both answered"
        if imported
        else "the interleaved ar baseline's"
    )
    note = (
        "`baseline` is the baseline file against itself."
        if imported
        else "`ar` is the baseline measured against itself: its speedup should be 1 within "
        "the interval."
    )
    w.add(
        "### Leaderboard",
        "",
        f"Speedup over autoregressive decoding (tokens/s ÷ {base}), "
        f"95% bootstrap interval in parentheses. {caption}.",
        "",
        tables.leaderboard_markdown(board, "speedup"),
        "",
        "τ_round: mean accepted tokens per decoding step, every verify round (Spec-Bench's "
        "“mean accepted tokens”; prefill not counted; vLLM's mean acceptance length and "
        "EAGLE's τ count only the rounds that drafted: summary.csv's tau_drafted), 95% "
        f"interval over units. {caption}.",
        "",
        tables.leaderboard_markdown(board, "tau_round"),
        "",
        f"<sub>data: [leaderboard__{s}.csv](leaderboard__{s}.csv). {note} No interval is "
        "shown where it collapses to a point (one prompt, or identical prompts). † the cell "
        "kept units disturbed by other work on the machine after re-measurement; ‡ disturbed "
        "units were re-measured and their quiet repeats used."
        + (f" {BOUND_NOTE}" if board.bound.any() else "")
        + "</sub>",
        "",
    )


def task_bars(x: Group) -> None:
    """Speedup and τ by task, as bar charts."""
    w, g, s, sub = x.w, x.g, x.s, x.sub
    t0 = tables.with_labels(tables.lowest_temperature(g))
    bars = t0[
        [
            "label",
            "method",
            "k",
            "task",
            *ci("speedup"),
            *ci("tau_round"),
        ]
    ]
    bars = tables.config_order(bars.assign(temperature=0)).drop(columns="temperature")
    w.section(
        "Speedup by task",
        None,
        charts.bars_by_task,
        bars,
        f"speedup_by_task__{s}.png",
        "speedup by task",
        "speedup",
        "speedup over autoregressive (×)",
        title="Speedup by task and method",
        subtitle=sub,
    )
    w.section(
        "τ by task",
        None,
        charts.bars_by_task,
        bars,
        f"tau_by_task__{s}.png",
        "tau_round by task",
        "tau_round",
        "τ_round (tokens per decoding step)",
        title="τ_round (mean accepted tokens per decoding step) by task and method",
        subtitle=sub,
    )


def k_sweep(x: Group) -> None:
    """Speedup and τ against the draft length k."""
    w, g, s, sub = x.w, x.g, x.s, x.sub
    ks = tables.k_sweep(g)
    w.section(
        "k sweep",
        "No method in this group ran at two or more values of k.",
        charts.sweep_lines,
        ks,
        f"k_sweep__{s}.png",
        "k sweep",
        "k",
        "k: draft tokens per round",
        "method",
        title="Speedup and τ against draft length k",
        subtitle=sub + " · overall",
    )


def temperature_sweep(x: Group) -> None:
    """Speedup and τ against the sampling temperature."""
    w, g, s = x.w, x.g, x.s
    ts = tables.temperature_sweep(g)
    w.section(
        "Temperature sweep",
        "No method config in this group ran at two or more temperatures.",
        charts.sweep_lines,
        ts,
        f"temperature_sweep__{s}.png",
        "temperature sweep",
        "temperature",
        "sampling temperature T (0 = greedy)",
        "label",
        title="Speedup and τ against sampling temperature",
        subtitle=x.name + " · overall",
    )


def acceptance(x: Group) -> None:
    """Acceptance rate per draft position."""
    w, g, s, sub = x.w, x.g, x.s, x.sub
    alpha = tables.alpha_table(g)
    w.section(
        "Acceptance rate per draft position",
        "No per-position draft counts in this group (no drafting method, or imported).",
        charts.alpha_per_position,
        alpha,
        f"alpha_per_position__{s}.png",
        "acceptance per position",
        title="Acceptance rate per draft position",
        subtitle=sub + " · overall",
    )


def time_breakdown(x: Group) -> None:
    """Where the wall time goes (prefill, draft, verify, other)."""
    w, g, recs, s, sub = x.w, x.g, x.recs, x.s, x.sub
    tb = tables.time_breakdown(recs, g)
    w.section(
        "Time breakdown",
        "No per-phase times in this group (imported answer files carry none).",
        charts.time_breakdown,
        tb,
        f"time_breakdown__{s}.png",
        "time breakdown",
        title="Where the wall time goes, per method",
        subtitle=sub,
    )


def cost_model(x: Group) -> None:
    """Measured speedup beside the cost model's prediction."""
    w, g, s, caption = x.w, x.g, x.s, x.caption
    cm = tables.cost_model(g)
    if len(cm):
        w.add(
            "### Cost model",
            "",
            "Measured speedup next to the prediction τ_round ÷ ((c(w) + draft time per round) "
            "÷ c(1)), with c the run's measured cost of a target forward over w tokens "
            "(w = tokens verified per round). A method far below its prediction loses to "
            "overheads; a low prediction means its drafter's acceptance, or this machine's "
            f"verify cost, limits it. {caption}.",
            "",
            tables.markdown_table(
                ["method", "τ per round", "predicted", "measured", "draft %"],
                [
                    [
                        r.label,
                        tables._num(r.tau_round),
                        tables._num(r.predicted_speedup, "{:.2f}×"),
                        tables._num(r.speedup, "{:.2f}×"),
                        tables._num(100 * r.draft_overhead, "{:.0f}"),
                    ]
                    for r in cm.itertuples()
                ],
            ),
            "",
        )
        w.csv(cm, f"cost_model__{s}.csv")


def subcategories(x: Group) -> None:
    """Speedup and τ per sub-category (MT-Bench's eight)."""
    w, recs, s, caption = x.w, x.recs, x.s, x.caption
    sub_df = tables.subcategory_detail(recs)
    if len(sub_df):
        w.csv(sub_df, f"subcategories__{s}.csv")
        w.add(
            "### Detail by sub-category",
            "",
            f"Median unit speedup and τ_round per sub-category (MT-Bench's eight). {caption}.",
            "",
            tables.markdown_table(
                ["method", "category", "sub-category", "units", "speedup", "τ_round"],
                [
                    [
                        r.label,
                        r.category,
                        r.subcategory,
                        r.units,
                        tables._num(r.speedup, "{:.2f}×"),
                        tables._num(r.tau_round),
                    ]
                    for r in sub_df.itertuples()
                ],
            ),
            "",
        )


def memory(x: Group) -> None:
    """Memory overhead per method."""
    w, g, s, sub = x.w, x.g, x.s, x.sub
    mem = tables.memory_table(g)
    w.section(
        "Memory overhead",
        "No memory measurements in this group (imported answer files carry none).",
        charts.memory,
        mem,
        f"memory__{s}.png",
        "memory overhead",
        title="Memory overhead per method (static drafter memory + peak-memory delta)",
        subtitle=sub,
    )


SECTIONS = (
    header,
    leaderboard,
    task_bars,
    k_sweep,
    temperature_sweep,
    acceptance,
    time_breakdown,
    cost_model,
    subcategories,
    memory,
)
