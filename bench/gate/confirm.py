"""The A/B gate's confirmation: a speed row that fails is measured again in fresh processes.

Two processes of one tree differ by more than their units' spread: where the weights, caches
and the allocator's pages land differs per process, and a cell can read 10-17% apart in two
processes of the same code (on the 2-core Xeon model 207: ar 12% and ngram 3% apart in two A
workers; CI failed eagle's batch=4 speedup at −17.3% against −11.2% on a tree whose engine and
methods equal the recorded commit's). One A′ is one draw of that spread. A slower tree is slower
in every process of it; an unlucky process is not. So when the only failed rows are speed rows
(tokens/s, speedup, the machine-wide row), the gate closes its workers, starts a fresh A, B and
A′ and measures those rows' cells again in trios: every speed cell where the machine-wide row
failed, else the failed cells and the ar at the same batch (their speedup rows); topped up like
the first pass. A failed row is cleared only where the fresh trio judges it, powered, within its
threshold ("unconfirmed": reported, named in the verdict's line, exit 0); where the fresh trio
fails it again or is too noisy to judge, it stays a REGRESSION (the planted 15% slowdown read
−0.1% for ar in one fresh pair whose A was the slow process: a fresh trio that cannot judge must
not pass a slower tree). A failed tokens, τ, unit or build row fails the gate at once.
"""

from __future__ import annotations

from dataclasses import replace

from bench.gate import paired
from bench.gate.cells import ar_cell
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
        out |= {r.method, ar_cell(r.method)}  # ar: the cell's speedup row
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
        verdict = "unconfirmed" if a.verdict in ("ok", "better") else "REGRESSION"
        said = a.rule.split(" (")[0]
        out.append(replace(r, rule=f"{r.rule}; fresh trio: {said} {a.verdict}", verdict=verdict))
    return out


def notes(cells: set[str], rows: list[Row], took: float) -> list[str]:
    held = [f"{r.method} {r.metric}" for r in rows if r.verdict == "unconfirmed"]
    line = f"confirmation: {len(cells)} cells measured again by a fresh trio in {took:.0f} s"
    return [line + (f"; held there: {', '.join(held)}" if held else "")]
