"""The gate's verdict table (rich), one row per method and metric."""

from __future__ import annotations

import sys

from bench.gate.rules import Row


def _fmt(row: Row, v) -> str:
    if v is None:
        return "–"
    return f"{v:.2f}" if row.metric in ("exact_match", "tokens") else f"{v:.3f}"


def print_table(rows: list[Row], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("method", "metric", "baseline", "now", "change", "rule", "verdict"):
        t.add_column(col, justify="right" if col in ("baseline", "now", "change") else "left")
    for r in rows:
        ch = r.change
        change = (
            "–"
            if ch is None
            else (f"{ch:+.2f}" if r.metric in ("exact_match", "tokens") else f"{ch:+.1%}")
        )
        style = "bold red" if r.failed else "green" if r.verdict in ("ok", "better") else "yellow"
        t.add_row(
            r.method,
            r.metric,
            _fmt(r, r.baseline),
            _fmt(r, r.now),
            change,
            r.rule,
            f"[{style}]{r.verdict}[/{style}]",
        )
    Console(width=None if sys.stdout.isatty() else 160).print(t)
