"""The one progress bar of every command (the run, the gate, training), written once."""

from __future__ import annotations


def progress_bar(console=None, transient: bool = True, remaining: bool = False):
    """The one rich progress bar of every command (description, bar, n/N, elapsed[, ETA]) on
    stderr, so stdout keeps only results."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    columns += [TimeElapsedColumn()] + ([TimeRemainingColumn()] if remaining else [])
    return Progress(*columns, console=console or Console(stderr=True), transient=transient)
