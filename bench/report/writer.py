"""The report's writer: index.md's Markdown, and the CSV and PNG files it links."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report import charts


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
