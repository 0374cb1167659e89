"""The report's charts: one function per chart, matplotlib on the Agg backend, PNG out.

Every chart is titled, names the (model, device, dtype) group it was measured on in a subtitle,
labels its axes with units, and draws each method in the same colour everywhere (`Palette`:
a fixed method → colour map; configurations of one method, e.g. k=2 and k=8, are shades of
its colour, the largest k darkest). Legends sit outside the axes so they never cover data.
Each function takes the tidy table the report also writes as CSV and returns the PNG's path.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

# Fixed colours for the methods specsweep ships or is likely to ship; others get spares in order.
FIXED = {
    "ar": "#6e6e6e",
    "baseline": "#6e6e6e",
    "ngram": "#1f77b4",
    "draft": "#ff7f0e",
    "medusa": "#2ca02c",
    "eagle": "#d62728",
    "eagle2": "#9467bd",
    "eagle3": "#8c564b",
    "hydra": "#e377c2",
    "lookahead": "#bcbd22",
    "rest": "#17becf",
    "suffix": "#aec7e8",
    "sam": "#98df8a",
    "sam+eagle": "#ff9896",
    "recycling": "#c5b0d5",
    "pld": "#1f77b4",
    "sps": "#ff7f0e",
}  # Spec-Bench names of ngram and draft
SPARE = [
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
    "#31a354",
    "#756bb1",
    "#636363",
    "#e6550d",
]
# phases in a brown-teal scheme no method uses, dark and light alternating
PHASES = {"prefill": "#01665e", "draft": "#80cdc1", "verify": "#8c510a", "other": "#dfc27d"}
DPI = 130
REF_LABEL = "1 = autoregressive"

plt.rcParams.update(
    {
        "font.size": 10,
        "axes.titlesize": 10,
        "figure.titlesize": 13,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.axisbelow": True,
    }
)


def config_label(method: str, k, auto: bool = False) -> str:
    """'ngram k=8', 'ngram k=auto', or the bare method name when k means nothing (ar) or is
    unknown."""
    if auto:
        return f"{method} k=auto"
    if k is None or (isinstance(k, float) and math.isnan(k)) or int(k) == 0:
        return str(method)
    return f"{method} k={int(k)}"


class Palette:
    """method → colour, fixed across every chart of a report; (method, k) → a shade of it."""

    def __init__(self, methods):
        self.colours = dict(FIXED)
        spare = iter(SPARE * 3)
        for m in sorted(set(methods) - set(FIXED)):
            self.colours[m] = next(spare)
        self.ks: dict[str, list] = {}

    def know_ks(self, cells: pd.DataFrame) -> None:
        """Remember each method's k values so a (method, k) gets the same shade in every chart."""
        for m, g in cells.groupby("method"):
            self.ks[m] = sorted({int(k) for k in g.k.dropna()})

    def method(self, m: str):
        return self.colours.get(m, "#000000")

    def config(self, m: str, k):
        ks = self.ks.get(m, [])
        base = np.array(to_rgb(self.method(m)))
        if k is None or (isinstance(k, float) and math.isnan(k)) or len(ks) < 2 or int(k) not in ks:
            return tuple(base)
        light = 0.6 * (len(ks) - 1 - ks.index(int(k))) / (len(ks) - 1)  # largest k: full colour
        return tuple(base + (1 - base) * light)


def _finish(fig, title: str, subtitle: str, path: Path) -> Path:
    # above the axes area, offset in points (not figure fractions) so that short and tall
    # figures space them alike; constrained layout leaves them alone, bbox "tight" keeps them
    at = [offset_copy(fig.transFigure, fig=fig, y=dy, units="points") for dy in (6, 22)]
    fig.text(
        0.5, 1.0, subtitle, ha="center", va="bottom", fontsize=9, color="#444444", transform=at[0]
    )
    fig.text(
        0.5, 1.0, title, ha="center", va="bottom", fontsize=13, fontweight="bold", transform=at[1]
    )
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def _task_label(t: str) -> str:
    return "overall" if t == "all" else t


def _errs(df: pd.DataFrame, col: str):
    lo, hi = df[f"{col}_ci_low"].to_numpy(float), df[f"{col}_ci_high"].to_numpy(float)
    v = df[col].to_numpy(float)
    e = np.vstack([np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)])
    return np.nan_to_num(e)


def _mark_missing(ax, xs, values) -> None:
    """A grey 'not run' where a bar is missing, so a gap never reads as zero."""
    for x, v in zip(xs, values):
        if v != v:  # NaN
            ax.text(
                x, 0, "not run", rotation=90, ha="center", va="bottom", fontsize=7, color="#888888"
            )


def bars_by_task(
    df: pd.DataFrame,
    metric: str,
    ylabel: str,
    palette: Palette,
    path: Path,
    title: str,
    subtitle: str,
    ref: float | None = 1.0,
) -> Path:
    """Grouped bars: x = task (overall last), one bar per method config, 95% interval whiskers.

    df: one row per (label, method, k, task) with `metric`, `<metric>_ci_low/high`."""
    tasks = sorted(df.task.unique(), key=lambda t: (t == "all", t))
    configs = df[["label", "method", "k"]].drop_duplicates().to_records(index=False)
    n = len(configs)
    width = 0.8 / n
    fig, ax = plt.subplots(
        figsize=(max(6.5, 1.2 + len(tasks) * (0.45 * n + 0.5)), 4.2), layout="constrained"
    )
    x = np.arange(len(tasks))
    for i, (label, method, k) in enumerate(configs):
        sub = df[df.label == label].set_index("task").reindex(tasks)
        off, vals = x + (i - (n - 1) / 2) * width, sub[metric].to_numpy(float)
        ax.bar(
            off,
            vals,
            width * 0.92,
            yerr=_errs(sub, metric),
            capsize=3,
            error_kw={"elinewidth": 1, "alpha": 0.8},
            color=palette.config(method, k),
            edgecolor="white",
            linewidth=0.5,
            label=label,
        )
        _mark_missing(ax, off, vals)
    if ref is not None:
        ax.axhline(ref, color="#222222", lw=1, ls="--", zorder=0, label=REF_LABEL)
    if "all" in tasks:
        ax.axvline(len(tasks) - 1.5, color="#999999", lw=0.8)
    ax.set_xticks(x, [_task_label(t) for t in tasks])
    ax.set_xlabel("task")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    fig.legend(title="method", loc="outside right upper", frameon=False)
    return _finish(fig, title, subtitle, path)


def sweep_lines(
    df: pd.DataFrame,
    x: str,
    xlabel: str,
    series: str,
    palette: Palette,
    path: Path,
    title: str,
    subtitle: str,
) -> Path:
    """Two panels, speedup (with 95% whiskers) and τ against `x`, one line per `series` value.

    df: one row per (series, x) with method, k, speedup(+ci), tau(+ci)."""
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.0), layout="constrained")
    auto = df[df.k_auto.fillna(False).astype(bool)] if "k_auto" in df else df.iloc[:0]
    df = df.drop(auto.index)
    for name, g in df.groupby(series, sort=True):
        g = g.sort_values(x)
        first = g.iloc[0]
        colour = (
            palette.method(first.method)
            if series == "method"
            else palette.config(first.method, first.k)
        )
        for ax, col in zip(axes, ("speedup", "tau_round")):
            ax.errorbar(
                g[x],
                g[col],
                yerr=_errs(g, col),
                color=colour,
                marker="o",
                ms=5,
                capsize=3,
                lw=1.6,
                label=name if ax is axes[0] else None,
            )
    for i, r in auto.iterrows():  # k=auto: one point at the mean size its rounds chose
        one = auto.loc[[i]]
        for ax, col in zip(axes, ("speedup", "tau_round")):
            ax.errorbar(
                one[x],
                one[col],
                yerr=_errs(one, col),
                color=palette.method(r.method),
                marker="*",
                ms=12,
                capsize=3,
                ls="none",
                label=f"{r.method} k=auto (at its mean k)" if ax is axes[0] else None,
            )
    for ax, ylabel in zip(
        axes, ("speedup over autoregressive (×)", "τ_round (tokens per decoding step)")
    ):
        ax.axhline(
            1.0,
            color="#222222",
            lw=1,
            ls="--",
            zorder=0,
            label=REF_LABEL if ax is axes[0] else None,
        )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_xticks(sorted(df[x].dropna().unique()))
        ax.set_ylim(bottom=0)
    axes[0].set_title("speedup (95% interval)")
    axes[1].set_title("τ (95% interval over prompts)")
    fig.legend(title="method", loc="outside right upper", frameon=False)
    return _finish(fig, title, subtitle, path)


def alpha_per_position(
    df: pd.DataFrame, palette: Palette, path: Path, title: str, subtitle: str
) -> Path:
    """α_i against draft position i, a line per method config. df: label, method, k, position,
    alpha."""
    fig, ax = plt.subplots(figsize=(7.5, 4.0), layout="constrained")
    for label, g in df.groupby("label", sort=True):
        g = g.sort_values("position")
        ax.plot(
            g.position,
            g.alpha,
            marker="o",
            ms=5,
            lw=1.6,
            label=label,
            color=palette.config(g.method.iloc[0], g.k.iloc[0]),
        )
    ax.set_xlabel("draft position i (1 = first drafted token)")
    ax.set_ylabel(r"acceptance rate $\alpha_i$ (accepted ÷ drafted)")
    ax.set_xticks(sorted(df.position.unique()))
    ax.set_ylim(0, 1.05)
    fig.legend(title="method", loc="outside right upper", frameon=False)
    return _finish(fig, title, subtitle, path)


def time_breakdown(
    df: pd.DataFrame, palette: Palette, path: Path, title: str, subtitle: str
) -> Path:
    """Stacked horizontal bars of the mean share of wall time per phase, one bar per method config.

    df: label, method, k, prefill, draft, verify, other (fractions), ms_per_token."""
    df = df.iloc[::-1]  # first config on top
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.5 * len(df)), layout="constrained")
    y = np.arange(len(df))
    left = np.zeros(len(df))
    for phase, colour in PHASES.items():
        share = df[phase].to_numpy(float) * 100
        ax.barh(y, share, left=left, color=colour, height=0.6, label=phase, edgecolor="white")
        for yi, (l, s) in enumerate(zip(left, share)):
            if s >= 7:
                ax.text(
                    l + s / 2,
                    yi,
                    f"{s:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if phase in ("prefill", "verify") else "black",
                )
        left += share
    for yi, ms in enumerate(df.ms_per_token):
        ax.text(101, yi, f"{ms:.0f} ms/token", va="center", fontsize=8)
    ax.set_yticks(y, df.label)
    for tick, m in zip(ax.get_yticklabels(), df.method):
        tick.set_color(palette.method(m))
        tick.set_fontweight("bold")
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of wall time (%), mean over turns; right: wall ms per new token")
    ax.grid(axis="y", visible=False)
    fig.legend(title="phase", loc="outside right upper", frameon=False)
    return _finish(fig, title, subtitle, path)


def memory(df: pd.DataFrame, palette: Palette, path: Path, title: str, subtitle: str) -> Path:
    """Bars of memory overhead (MB) per method config. df: label, method, k, memory_overhead_mb."""
    fig, ax = plt.subplots(figsize=(max(5.5, 1.5 + 0.9 * len(df)), 3.8), layout="constrained")
    x = np.arange(len(df))
    vals = df.memory_overhead_mb.to_numpy(float)
    ax.bar(x, vals, 0.6, color=[palette.config(m, k) for m, k in zip(df.method, df.k)])
    top = max(np.nanmax(vals) if len(vals) else 0, 1.0)
    for xi, v in zip(x, vals):
        ax.text(
            xi,
            (v if v == v else 0) + top * 0.02,
            "–" if v != v else f"{v:.1f}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(x, [textwrap.fill(s, 12) for s in df.label])
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel("method")
    ax.set_ylabel("memory overhead (MB)")
    return _finish(fig, title, subtitle, path)


def device_comparison(
    df: pd.DataFrame, palette: Palette, path: Path, title: str, subtitle: str
) -> Path:
    """Two panels, speedup (95% whiskers) and method tokens/s, x = device, a bar per method config.

    df: device_name, label, method, k, speedup(+ci), tokens_per_s."""
    devices = list(dict.fromkeys(df.device_name))
    configs = df[["label", "method", "k"]].drop_duplicates().to_records(index=False)
    n = len(configs)
    width = 0.8 / n
    fig, axes = plt.subplots(
        1, 2, figsize=(max(10, 2 + len(devices) * (0.8 * n + 1)), 4.2), layout="constrained"
    )
    x = np.arange(len(devices))
    for i, (label, method, k) in enumerate(configs):
        sub = df[df.label == label].set_index("device_name").reindex(devices)
        off = x + (i - (n - 1) / 2) * width
        colour = palette.config(method, k)
        axes[0].bar(
            off,
            sub.speedup.to_numpy(float),
            width * 0.92,
            yerr=_errs(sub, "speedup"),
            capsize=3,
            color=colour,
            label=label,
        )
        axes[1].bar(off, sub.tokens_per_s.to_numpy(float), width * 0.92, color=colour)
        for ax in axes:
            _mark_missing(ax, off, sub.speedup.to_numpy(float))
    axes[0].axhline(1.0, color="#222222", lw=1, ls="--", zorder=0, label=REF_LABEL)
    for ax, ylabel, t in zip(
        axes,
        ("speedup over autoregressive (×)", "method throughput (tokens/s)"),
        ("speedup (95% interval)", "throughput"),
    ):
        ax.set_xticks(x, [textwrap.fill(d, 22) for d in devices])
        ax.set_xlabel("device")
        ax.set_ylabel(ylabel)
        ax.set_title(t)
        ax.set_ylim(bottom=0)
    fig.legend(title="method", loc="outside right upper", frameon=False)
    return _finish(fig, title, subtitle, path)


def batch_lines(df: pd.DataFrame, palette: Palette, path: Path, title: str, subtitle: str) -> Path:
    """Two panels against the batch size B: each method's speedup over the baseline at the same
    B, and the aggregate tokens/s of each method and of the baseline (ar, dashed).

    df: one row per (method, B) with speedup, tokens_per_s, baseline_tokens_per_s."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.0), layout="constrained")
    for name, g in df.groupby("method", sort=True):
        g = g.sort_values("batch")
        colour = palette.method(name)
        left.plot(g.batch, g.speedup, color=colour, marker="o", ms=5, lw=1.6, label=name)
        right.plot(g.batch, g.tokens_per_s, color=colour, marker="o", ms=5, lw=1.6, label=name)
    base = df.groupby("batch").baseline_tokens_per_s.median().sort_index()
    right.plot(base.index, base.values, color="#555555", ls="--", marker="s", ms=4, label="ar")
    left.axhline(1.0, color="#888888", lw=0.8)
    for ax, label in ((left, "speedup over ar at the same B"), (right, "tokens/s (all sequences)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(df.batch.unique()), [str(int(b)) for b in sorted(df.batch.unique())])
        ax.set_xlabel("B: conversations decoded together")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    return _finish(fig, title, subtitle, path)
