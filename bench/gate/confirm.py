"""The A/B gate's confirmation: a speed row that fails is measured again in fresh processes.

Two processes of one tree differ by more than their units' spread: where the weights, caches
and the allocator's pages land differs per process, and a cell can read 10-17% slower in one B
process than in A though the code is the same (a batch=4 cell, 8 units, on the 2-core Xeon model
207: −17.3% against a −11.2% threshold). One A′ draw estimates that offset, not its spread over
cells. A slower tree is slower in every process of it; an unlucky process is not. So when the
only failed rows are speed rows (tokens/s, speedup, the machine-wide row), the gate starts a fresh
A and a fresh B and measures those rows' cells again in trios (fresh A, fresh B, the first A′):
every speed cell where the machine-wide row failed, else the failed cells and, for a speedup, the
ar at the same batch; topped up like the first pass. A row stays a REGRESSION only where it fails
again; one that holds in the fresh pair is "unconfirmed" (reported and named in the verdict's
line, exit 0), one too noisy to judge the second time "underpowered". A failed tokens, τ, unit or
build row fails the gate at once: nothing to confirm.
"""

from __future__ import annotations

from dataclasses import replace

from bench.gate import paired
from bench.gate.rules import Row


def cells_to_confirm(rows: list[Row], ready_b: dict) -> set[str] | None:
    """The cells to measure again, or None where a failure is not a speed row's (or none failed)."""
    failed = [r for r in rows if r.failed]
    if not failed or any(r.metric not in paired.METRICS for r in failed):
        return None
    kinds = {c["name"]: c["kind"] for c in ready_b["cells"]}
    out = set()
    for r in failed:
        if r.method == "all":
            out |= {c for c, k in kinds.items() if k == "speed"}
            continue
        out.add(r.method)
        if r.metric == "speedup":
            batch = r.method.partition("@")[2]
            out.add(f"ar@{batch}" if batch else "ar")
    return {c for c in out if c in kinds}


def only(ready: dict, cells: set[str]) -> dict:
    """A worker's ready message with its cells narrowed to `cells` (the rows measured again)."""
    return {**ready, "cells": [c for c in ready["cells"] if c["name"] in cells]}


def judge(first: list[Row], again: list[Row]) -> list[Row]:
    """The first pass's rows, each failed speed row judged by its second measurement."""
    by = {(r.method, r.metric): r for r in again}
    out = []
    for r in first:
        a = by.get((r.method, r.metric))
        if not r.failed or r.metric not in paired.METRICS or a is None:
            out.append(r)
            continue
        verdict = a.verdict if a.verdict in ("REGRESSION", "underpowered") else "unconfirmed"
        said = a.rule.split(" (")[0]
        out.append(replace(r, rule=f"{r.rule}; fresh A and B: {said} {a.verdict}", verdict=verdict))
    return out


def notes(cells: set[str], rows: list[Row], took: float) -> list[str]:
    held = [f"{r.method} {r.metric}" for r in rows if r.verdict == "unconfirmed"]
    line = f"confirmation: {len(cells)} cells measured again by a fresh A and B in {took:.0f} s"
    return [line + (f"; held there: {', '.join(held)}" if held else "")]
