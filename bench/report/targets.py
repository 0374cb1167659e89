"""Each method on both targets side by side: the embedded model's 4-bit file as shipped and its
16-bit copy (or any targets of one model on one device that differ in weight format), with each
target's plain decoding and one chart of absolute tokens/s, the fastest plain decoding drawn as
the reference line: a speedup over a slow target is not speed (llama.cpp issue #10664: a Q4
target alone beat a Q8 target with a draft), so the words under the table say which is faster.

    python -m bench.report.targets RUN_OR_SWEEP_DIR...
    python -m bench.report.targets --sweep "OVERRIDES" ...   # the end of `make bench`: the
                                                  # folders those sweep commands wrote
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from bench.report import charts, tables
from bench.report.runs import load_runs, slug
from bench.run.config import sweep_id
from groundfloor.paths import ROOT

PLAIN = "plain decoding (ar)"


def overall(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (target, method config): each cell's row over all its tasks, labelled."""
    c = cells[(cells.category == "all") & (cells.batch == 1)]
    if "engine" in c:  # our engine on each target; transformers' peers decode on their own
        c = c[c.engine != "hf"]
    many = c.groupby("run").task.transform("nunique") > 1
    return c[~many | (c.task == "all")].assign(label=lambda d: d.method)


def side_by_side(cells: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """(table: a row per method, per target its speedup [95%], tokens/s and exact match, then each
    target's plain decoding; the sentence that compares the fastest against the reference)."""
    c = overall(cells)
    targets = list(dict.fromkeys(c.target_format))
    plain = c.groupby("target_format").baseline_tokens_per_s.median()
    rows = []
    for label, g in c.groupby("label", sort=False):
        row = {"method": label}
        for t in targets:
            r = g[g.target_format == t]
            if r.empty:
                row.update({f"{t} speedup": "–", f"{t} tok/s": "–", f"{t} exact": "–"})
                continue
            r = r.iloc[-1]
            row[f"{t} speedup"] = (
                f"{r.speedup:.2f}× [{r.speedup_ci_low:.2f}–{r.speedup_ci_high:.2f}]"
            )
            row[f"{t} tok/s"] = f"{r.tokens_per_s:.1f}"
            row[f"{t} exact"] = "–" if pd.isna(r.exact_match) else f"{r.exact_match:.2f}"
        rows.append(row)
    rows.append({"method": PLAIN} | {f"{t} tok/s": f"{plain[t]:.1f}" for t in targets})
    table = pd.DataFrame(rows).fillna("")
    ref = plain.idxmax()
    others = c[c.target_format != ref]
    if others.empty:
        return table, f"One target only ({ref}): nothing to compare."
    best = others.loc[others.tokens_per_s.idxmax()]
    verb = "below" if best.tokens_per_s < plain[ref] else "above"
    words = (
        f"The fastest plain decoding is the {ref} target's, {plain[ref]:.1f} tokens/s. The "
        f"{best.target_format} target's fastest method, {best.label} at {best.speedup:.2f}× "
        f"its own plain decoding, runs at {best.tokens_per_s:.1f} tokens/s: {verb} it "
        f"({best.tokens_per_s / plain[ref]:.2f}×)."
    )
    return table, words


def chart_data(cells: pd.DataFrame) -> pd.DataFrame:
    c = overall(cells)
    return c[["label", "target_format", "tokens_per_s", "baseline_tokens_per_s"]]


def absolute(df: pd.DataFrame, palette, path: Path, title: str, subtitle: str) -> Path:
    """Horizontal bars of tokens/s, a bar per target for each method, plain decoding of every
    target among them, and a dashed line at the fastest plain decoding."""
    plain = df.groupby("target_format").baseline_tokens_per_s.median()
    rows = pd.concat(
        [df[["label", "target_format", "tokens_per_s"]]]
        + [
            pd.DataFrame({"label": [PLAIN], "target_format": [t], "tokens_per_s": [v]})
            for t, v in plain.items()
        ]  # fmt: skip
    )
    labels = list(dict.fromkeys(rows.label))
    targets = list(dict.fromkeys(rows.target_format))
    fig, ax = charts.plt.subplots(figsize=(9, 1.2 + 0.45 * len(labels) * len(targets)))
    height = 0.8 / len(targets)
    for i, t in enumerate(targets):
        sub = rows[rows.target_format == t].set_index("label").reindex(labels)
        ys = charts.np.arange(len(labels)) + (i - (len(targets) - 1) / 2) * height
        ax.barh(ys, sub.tokens_per_s.to_numpy(float), height * 0.9, label=t)
    ax.axvline(plain.max(), color="#222222", ls="--", lw=1,
               label=f"{plain.idxmax()} plain decoding")  # fmt: skip
    ax.set_yticks(charts.np.arange(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("tokens/s (absolute)")
    ax.legend(title="target", loc="lower right", frameon=False)
    return charts._finish(fig, title, subtitle, path)


def section(w, cells: pd.DataFrame) -> None:
    """The report's section: per model and device with several targets, the table, the words
    and the chart."""
    w.add('<a id="targets"></a>', "", "## Each method on each target", "")
    shown = False
    for (model, device), g in cells.groupby(["model", "device_name"], sort=False):
        if g.target_format.nunique() < 2:
            continue
        shown = True
        table, words = side_by_side(g)
        w.add(f"**{model} · {device}**", "", tables.markdown_table(list(table.columns),
              table.values.tolist()), "", words, "")  # fmt: skip
        w.chart(absolute, chart_data(g), f"targets__{slug(model + '-' + device)}.png",
                "tokens/s on each target", title="Absolute tokens/s on each target",
                subtitle=f"{model} · {device}")  # fmt: skip
    if not shown:
        w.add("No comparison: it needs one model measured on two targets (weight formats).", "")


def paths_of(args: list[str]) -> list[Path]:
    """Run or sweep folders; `--sweep "OVERRIDES"`: the folder that sweep command wrote (its
    results/sweep_<id>, bench.run.config.sweep_id)."""
    out, it = [], iter(args)
    for a in it:
        if a == "--sweep":
            out.append(ROOT / "results" / f"sweep_{sweep_id(next(it).split())}")
        else:
            out.append(Path(a))
    return out


def main(argv: list[str] | None = None) -> int:
    paths = paths_of(sys.argv[1:] if argv is None else argv)
    cells, _, _ = load_runs(paths)
    if cells.empty or "target_format" not in cells:
        print(f"no cells with a target format under {', '.join(map(str, paths))}")
        return 1
    for (model, device), g in cells.groupby(["model", "device_name"], sort=False):
        table, words = side_by_side(g)
        print(f"\n{model} · {device}: each method on each target\n")
        print(tables.markdown_table(list(table.columns), table.values.tolist()))
        print(f"\n{words}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
