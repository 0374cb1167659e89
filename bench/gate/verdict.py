"""The A/B gate's verdict: its one line (printed first and last) and the run's JSON file.

    FAIL: the two trees did not run the same thing (...)           exit 1
    FAIL: regression in M, ... [; underpowered: ...]               exit 1
    PASS, but underpowered (too noisy to judge after top-up): ...  exit 0
    PASS, but not confirmed in fresh processes: ...                exit 0
    PASS                                                           exit 0

The JSON (`--json PATH`, and verdict.json under --out) holds the line, the exit status, every
row, the underpowered and the unconfirmed rows by name ("method metric": a speed row that failed
and held when measured again in fresh processes, bench/gate/confirm.py) and the notes; .ci/run
reads both for its warning lines.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from bench.gate import paired
from bench.gate.rules import Row


def named(rows: list[Row], verdict: str) -> list[str]:
    """The rows with this verdict, by name ("method metric")."""
    return [f"{r.method} {r.metric}" for r in rows if r.verdict == verdict]


def headline(
    rows: list[Row], blocking: list[str], weak_why: str = "too noisy to judge after top-up"
) -> tuple[int, str]:
    """(exit status, the verdict's line)."""
    weak = named(rows, "underpowered")
    failed = sorted({r.method for r in rows if r.failed})
    if blocking:
        return 1, "FAIL: the two trees did not run the same thing (" + "; ".join(blocking) + ")"
    if failed:
        tail = f"; underpowered: {', '.join(weak)}" if weak else ""
        return 1, f"FAIL: regression in {', '.join(failed)}{tail}"
    held = named(rows, "unconfirmed")
    said = [f"underpowered ({weak_why}): {', '.join(weak)}"] if weak else []
    said += [f"not confirmed in fresh processes: {', '.join(held)}"] if held else []
    return 0, "PASS, but " + "; ".join(said) if said else "PASS"


def simulated_line(trees: dict, tol: float) -> str | None:
    """False-alarm and detection rates simulated from the run's own A′-against-A units."""
    false, caught = paired.simulate(trees, tol)
    if not caught or math.isnan(false):
        return None
    worst = min(caught, key=caught.get)
    return (
        f"from this run's own units (1,000 simulated gate runs): false alarms {false:.1%} of "
        f"runs, all methods together; a {tol:.0%} slowdown of one method caught in "
        f"{min(caught.values()):.1%}–{max(caught.values()):.1%} (lowest: {worst[0]} {worst[1]})"
    )


def write_json(path: Path, doc: dict, rows: list[Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    full = {
        **doc,
        "verdict": doc["line"].split(":")[0].split(",")[0],
        "underpowered": named(rows, "underpowered"),
        "unconfirmed": named(rows, "unconfirmed"),
        "failed": sorted({r.method for r in rows if r.failed}),
        "rows": [asdict(r) for r in rows],
    }
    path.write_text(json.dumps(full, indent=1, default=_plain) + "\n")


def _plain(v):
    return None if isinstance(v, float) and math.isnan(v) else float(v)
