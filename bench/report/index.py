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
from bench.report.batch import batch_section
from bench.report.group import SECTIONS, Group
from bench.report.runs import load_runs, slug
from bench.report.serve import is_server, server_section
from bench.report.specbench_import import import_cells, parse_method_args
from bench.report.writer import Writer
from groundfloor.errors import UserError
from groundfloor.paths import ROOT


def clear_outputs(out: Path) -> None:
    """Remove a previous report's files (index.md, *.png, *.csv); keep anything else."""
    out.mkdir(parents=True, exist_ok=True)
    for p in [out / "index.md", *out.glob("*.png"), *out.glob("*.csv")]:
        if p.is_file():
            p.unlink()


def display_path(p: str) -> str:
    """A run's path relative to the repository when it lies inside it."""
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


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
        "At T = 0 every turn's output ids are compared with the baseline's, on every repeat: "
        "`exact_match` is the fraction of prompts whose turns all match; a divergence is a "
        "near-tie when the target's own logits for the two tokens are within the tie "
        "tolerance on an engine whose rows are not batch invariant, else a mismatch "
        "(a bug); turns after a divergence are re-decoded on the baseline's history. At "
        "T > 0, `dist_pvalue` is the distribution check's p-value over the tasks it tested "
        "(`untested`: the method drafted too little in it) when the run used "
        "`check=distribution`. See docs/metrics.md and docs/sampling.md.",
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
            f"{len(div)} divergent turn(s) over every repeat, with the first divergent token "
            "and the logit gaps:",
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
    loaded = cells.batch > 1 if "batch" in cells else pd.Series(False, index=cells.index)
    cells = cells[~serve & ~loaded]  # server and batch=B cells have their own sections
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
        + " · [Each method on each target](#targets) · [Device comparison](#device-comparison)"
        + " · [Losslessness](#losslessness) · "
        + ("[Under load](#under-load) · " if loaded.any() or serve.any() else "")
        + "[Runs](#runs)",
        "",
    )
    for group in groups:
        g = cells[cells.group == group]
        x = Group.of(w, group, g, recs[recs.group == group] if len(recs) else recs)
        for section in SECTIONS:
            section(x)
    if len(cells):
        from bench.report import targets  # cycle: -m bench.report.targets would import it twice

        targets.section(w, cells)
        device_section(w, cells)
        lossless_section(w, cells, recs)
    if loaded.any() or serve.any():  # in-process batches and servers: one section, named apart
        w.add('<a id="under-load"></a>', "", "## Under load", "")
        batch_section(w, all_cells[~serve])
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
