"""Comparison report: every run under results/ (or the runs given) → reports/index.md + CSV + PNG.

    python -m bench.report                                 # all of results/ (make report)
    python -m bench.report results/2026-01-01_12-00-00_sweep other/run --out reports
    python -m bench.report --specbench-baseline vicuna-ar.jsonl --specbench eagle=eagle.jsonl

Numbers are grouped by (model, device, dtype): each group gets its own leaderboard (Spec-Bench's
shape: a row per method config, a column per task, then overall; speedup and τ with 95%
intervals) and charts (speedup and τ by task, k and temperature sweeps, α per draft position,
time breakdown, memory). Then a device comparison when runs from several devices are present,
the losslessness section, and the server cells of backend=server (bench/report/serve.py).
Spec-Bench answer files are imported as a group of their own.
Outputs are rewritten on each run; every chart's data is also written as CSV beside it.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd

from bench.report import charts, tables
from bench.report.serve import is_server, server_section
from bench.runs import load_runs, slug
from groundfloor.errors import UserError
from groundfloor.paths import ROOT


def clear_outputs(out: Path) -> None:
    """Remove a previous report's files (index.md, *.png, *.csv); keep anything else."""
    out.mkdir(parents=True, exist_ok=True)
    for p in [out / "index.md", *out.glob("*.png"), *out.glob("*.csv")]:
        if p.is_file():
            p.unlink()


class Writer:
    """Collects index.md's Markdown and writes the CSV and PNG files it links."""

    def __init__(self, out: Path, palette: charts.Palette):
        self.out, self.palette, self.md = out, palette, []

    def add(self, *lines: str) -> None:
        self.md.extend(lines)

    def csv(self, df: pd.DataFrame, name: str) -> str:
        df.to_csv(self.out / name, index=False)
        return name

    def chart(self, fn, df: pd.DataFrame, name: str, alt: str, *args, **kw) -> None:
        self.csv(df, name.replace(".png", ".csv"))
        fn(df, *args, palette=self.palette, path=self.out / name, **kw)
        self.add(
            f"![{alt}]({name})",
            f"<sub>data: [{name.replace('.png', '.csv')}]({name.replace('.png', '.csv')})</sub>",
            "",
        )

    def section(
        self,
        heading: str,
        empty: str | None,
        fn,
        df: pd.DataFrame,
        name: str,
        alt: str,
        *args,
        **kw,
    ) -> None:
        """A `###` section: the chart of `df`, or the sentence `empty` when df has no rows."""
        self.add(f"### {heading}", "")
        if empty is not None and df.empty:
            self.add(empty, "")
        else:
            self.chart(fn, df, name, alt, *args, **kw)


def display_path(p: str) -> str:
    """A run's path relative to the repository when it lies inside it."""
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def settings_note(g: pd.DataFrame) -> str:
    settings = sorted(g.settings.unique())
    if len(settings) == 1:
        return f"Settings: {settings[0]}."
    return (
        "**Mixed settings**: rows in this group come from runs with different prompt sets "
        "or lengths (" + "; ".join(settings) + "); compare rows with care."
    )


def group_section(w: Writer, group: str, g: pd.DataFrame, recs: pd.DataFrame) -> None:
    s = slug(group)
    first = g.iloc[0]
    runs = g.run.nunique()
    imported = first["source"] != "specsweep"
    what = "answer file" if imported else "run"
    caption = (
        f"model **{first['model']}** · device **{first['device_name']}** · dtype "
        f"**{first['dtype']}** · {runs} {what}{'s' if runs != 1 else ''}"
    )
    w.add(f'<a id="{s}"></a>', "", f"## {group}", "", caption + ". " + settings_note(g), "")

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
        f"τ, mean accepted tokens per target forward (95% interval over prompts). {caption}.",
        "",
        tables.leaderboard_markdown(board, "tau"),
        "",
        f"<sub>data: [leaderboard__{s}.csv](leaderboard__{s}.csv). {note} No interval is "
        "shown where it collapses to a point (one prompt, or identical prompts). † the cell "
        "kept units disturbed by other work on the machine after re-measurement; ‡ disturbed "
        "units were re-measured and their quiet repeats used.</sub>",
        "",
    )

    t0 = tables.with_labels(tables.lowest_temperature(g))
    temp = t0.temperature.dropna()
    sub = f"{group} · T={temp.min():g}" if len(temp) else group
    bars = t0[
        [
            "label",
            "method",
            "k",
            "task",
            "speedup",
            "speedup_ci_low",
            "speedup_ci_high",
            "tau",
            "tau_ci_low",
            "tau_ci_high",
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
        "tau by task",
        "tau",
        "τ (tokens per target forward)",
        title="τ by task and method",
        subtitle=sub,
    )

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
        subtitle=group + " · overall",
    )
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
    sub_df = tables.subcategory_detail(recs)
    if len(sub_df):
        w.csv(sub_df, f"subcategories__{s}.csv")
        w.add(
            "### Detail by sub-category",
            "",
            f"Median unit speedup and τ per sub-category (MT-Bench's eight). {caption}.",
            "",
            tables.markdown_table(
                ["method", "category", "sub-category", "units", "speedup", "τ"],
                [
                    [
                        r.label,
                        r.category,
                        r.subcategory,
                        r.units,
                        tables._num(r.speedup, "{:.2f}×"),
                        tables._num(r.tau),
                    ]
                    for r in sub_df.itertuples()
                ],
            ),
            "",
        )
    mem = tables.memory_table(g)
    w.section(
        "Memory overhead",
        "No memory measurements in this group (imported answer files carry none).",
        charts.memory,
        mem,
        f"memory__{s}.png",
        "memory overhead",
        title="Memory overhead per method (extra weights + peak-memory delta)",
        subtitle=sub,
    )


def device_section(w: Writer, cells: pd.DataFrame) -> None:
    w.add('<a id="device-comparison"></a>', "", "## Device comparison", "")
    dev = tables.device_table(cells)
    if dev.empty:
        ours = cells[cells.source == "specsweep"]
        pairs = "; ".join(
            f"{m} {d} on {', '.join(sorted(g.device_name.unique()))}"
            for (m, d), g in ours.groupby(["model", "dtype"])
        )
        w.add(
            "No comparison: it needs the same model and dtype measured on two or more devices "
            f"({pairs or 'no specsweep runs'}).",
            "",
        )
        return
    for (model, dtype), g in dev.groupby(["model", "dtype"], sort=False):
        name = f"device_comparison__{slug(model + '-' + dtype)}.png"
        w.add(f"Model **{model}**, dtype **{dtype}**, one bar per method and device.", "")
        w.chart(
            charts.device_comparison,
            g,
            name,
            "device comparison",
            title="The same methods on different devices",
            subtitle=f"{model} · {dtype}",
        )


def lossless_section(w: Writer, cells: pd.DataFrame, recs: pd.DataFrame) -> None:
    w.add(
        '<a id="losslessness"></a>',
        "",
        "## Losslessness",
        "",
        "At T = 0 every turn's output ids are compared with the baseline's: `exact_match` is "
        "the fraction of prompts whose turns all match; a divergence is a near-tie when the "
        "target's own logits for the two tokens are within the tie tolerance, else a mismatch "
        "(a bug). At T > 0, `dist_pvalue` is the distribution check's p-value when the run "
        "used `check=distribution`. See docs/metrics.md.",
        "",
    )
    table = tables.lossless_table(cells)
    w.csv(table, "losslessness.csv")
    if table.empty:
        w.add("No specsweep runs: imported answer files carry no losslessness verdicts.", "")
    for group, g in table.groupby("group", sort=False):
        w.add(
            f"**{group}**: exact_match at T = 0 (near-ties and mismatches counted), the "
            "distribution check's p-value at T > 0.",
            "",
            tables.lossless_markdown(g),
            "",
        )
    w.add("<sub>data: [losslessness.csv](losslessness.csv)</sub>", "")
    div = tables.divergences(recs)
    w.csv(div, "divergences.csv")
    if div.empty:
        w.add("No divergences: every greedy output matched the baseline token for token.", "")
    else:
        w.add(
            f"{len(div)} divergent turn(s), with the first divergent token and the logit gaps:",
            "",
            tables.divergence_markdown(div),
            "",
            "<sub>data: [divergences.csv](divergences.csv)</sub>",
            "",
        )


def build(paths: list[Path], out: Path, imported: pd.DataFrame | None = None) -> Path:
    """Write the report for the runs under `paths` (plus imported cells) into `out`."""
    cells, recs, runs = load_runs(paths)
    if imported is not None and len(imported):
        cells = pd.concat([cells, imported], ignore_index=True) if len(cells) else imported
    if cells.empty:
        raise UserError(
            f"no runs found under {', '.join(map(str, paths))}: run `make bench` "
            "(or pass run directories holding summary.csv)"
        )
    clear_outputs(out)
    all_cells, serve = cells, is_server(cells)
    cells = cells[~serve]  # server cells have their own section
    if len(recs) and serve.any():
        recs = recs[~recs.run.isin(set(all_cells[serve].run))]
    palette = charts.Palette(all_cells.method.unique())
    palette.know_ks(cells)
    w = Writer(out, palette)
    groups = list(dict.fromkeys(cells.group))
    command = " ".join(["python -m bench.report", *(display_path(str(p)) for p in paths)])
    w.add(
        "# specsweep report",
        "",
        f"Generated {datetime.now():%Y-%m-%d %H:%M} by `{command}` from {len(runs)} run(s) "
        f"in {len(groups)} group(s) (model · device · engine · weights · dtype). Numbers from "
        "different groups "
        "are never pooled. When several runs measured the same cell (method, k, T, task), "
        "the newest is shown.",
        "",
        "Contents: "
        + " · ".join(f"[{g}](#{slug(g)})" for g in groups)
        + " · [Device comparison](#device-comparison) · [Losslessness](#losslessness) · "
        + ("[Servers](#servers) · " if serve.any() else "")
        + "[Runs](#runs)",
        "",
    )
    for group in groups:
        g = cells[cells.group == group]
        group_section(w, group, g, recs[recs.group == group] if len(recs) else recs)
    if len(cells):
        device_section(w, cells)
        lossless_section(w, cells, recs)
    server_section(w, all_cells)
    if "host" not in all_cells:
        all_cells = all_cells.assign(host="unknown")
    if "device_name" not in all_cells:
        all_cells = all_cells.assign(device_name="")
    run_list = all_cells[["group", "run", "host", "device_name", "settings"]].drop_duplicates()
    run_list["host"] = run_list.host.fillna("unknown")
    run_list["run"] = [display_path(r) for r in run_list.run]
    w.csv(run_list, "runs.csv")
    w.add(
        '<a id="runs"></a>',
        "",
        "## Runs",
        "",
        "Where every cell ran (runs merged from "
        "several machines keep their own host and device, from each run's env.json).",
        "",
        tables.markdown_table(
            ["group", "run", "host", "machine", "settings"], run_list.values.tolist()
        ),
        "",
    )
    (out / "index.md").write_text("\n".join(w.md) + "\n", encoding="utf-8")
    return out / "index.md"


def main(argv: list[str] | None = None) -> int:
    from bench.report.specbench_import import import_cells, parse_method_args

    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n")[0])
    ap.add_argument(
        "runs", nargs="*", type=Path, help="run directories or folders of them (default: results/)"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "reports", help="output folder")
    ap.add_argument(
        "--specbench-baseline",
        type=Path,
        help="Spec-Bench answer file of the autoregressive baseline",
    )
    ap.add_argument(
        "--specbench",
        action="append",
        default=[],
        metavar="[NAME=]FILE",
        help="a Spec-Bench answer file of a method (repeatable)",
    )
    ap.add_argument(
        "--specbench-model",
        help="model name for the imported files (default: the baseline's model_id)",
    )
    ap.add_argument("--specbench-device", default="unknown device")
    ap.add_argument("--specbench-dtype", default="unknown dtype")
    args = ap.parse_args(argv)
    try:
        if args.specbench and not args.specbench_baseline:
            raise UserError("--specbench needs --specbench-baseline FILE (the ar answers)")
        imported = None
        if args.specbench_baseline:
            imported = import_cells(
                args.specbench_baseline,
                parse_method_args(args.specbench),
                args.specbench_model,
                args.specbench_device,
                args.specbench_dtype,
            )
        paths = args.runs or (
            [ROOT / "results"] if imported is None or (ROOT / "results").exists() else []
        )
        index = build(paths, args.out, imported)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {index}")
    return 0
