"""The A/B gate's measurements: the trees' workers asked in turn, unit by unit, in an order that
lets drift cancel and never runs one tree twice in a row.

A speed or batch cell's unit is measured by the three trees (a trio), a fixed cell's by A and B (a
pair: deterministic, one run each; by B alone on a CPU kind the baseline has an entry for, whose
committed ids were recorded from A there), a cell only B has by B alone. Each trio takes the next
rotation of (A, B, A′): A B A′, B A′ A, A′ A B, … so that every tree takes every position alike over
three trios (a linear drift cancels in B − A and in A′ − A), and the tree that ran last never runs
first (the old A B A′ then A′ B A ran A′ twice in a row); a pair takes whichever of A B, B A does
not start with the tree that ran last. A unit that other work disturbed in any tree is measured
again (up to REMEASURE times) and counted. A top-up pass measures a unit again: its repeats are kept
side by side and averaged into the unit (`collapse`), never new units.
"""

from __future__ import annotations

import math
import sys
import time

from bench.gate.units import unit_key
from groundfloor.progress import progress_bar

TREES = ("A", "B", "A′")
REMEASURE = 2  # extra tries of a unit that other work disturbed


class Order:
    """The tree order of each trio or pair (module docstring)."""

    def __init__(self):
        self.last, self.i = None, 0

    def next(self, trees: tuple[str, ...]) -> tuple[str, ...]:
        n = len(trees)
        for shift in range(n):
            k = (self.i + shift) % n
            order = trees[k:] + trees[:k]
            if order[0] != self.last:
                break
        self.i += 1
        self.last = order[-1]
        return order


def figures(turns: list[dict], prompt: str) -> dict[str, dict]:
    """{unit: {tokens_per_s, new_tokens, forwards, ids}} of one conversation's turns."""
    return {unit_key(prompt, t): _figure(d) for t, d in enumerate(turns)}


def _figure(d: dict) -> dict:
    return {
        "tokens_per_s": d["new_tokens"] / (d["wall_ns"] / 1e9),
        "new_tokens": d["new_tokens"],
        "forwards": d["forwards"],
        "ids": d["ids"],
    }


def group_key(g: int) -> str:
    return f"group{g}"


class Measurer:
    """Runs the plan's units on the workers; got[tree][cell][unit] = [figures of each repeat]."""

    def __init__(self, workers: dict, cells_of: dict[str, dict[str, str]],
                 fixed: tuple[str, ...] = ("A", "B")):  # fmt: skip
        self.workers, self.cells_of = workers, cells_of  # cells_of[tree] = {cell: kind}
        self.fixed = fixed  # the trees that run a fixed cell
        self.order = Order()
        self.got: dict = {k: {} for k in workers}
        self.counts = {"remeasured": 0, "still_disturbed": 0, "topup_trios": 0}

    def trees_for(self, cell: str) -> tuple[str, ...]:
        if cell not in self.cells_of["B"]:
            return ()  # B cannot run it: a failed row, nothing to measure
        kind = self.cells_of["B"][cell]
        want = self.fixed if kind == "fixed" else TREES
        return tuple(k for k in want if k in self.workers and cell in self.cells_of[k])

    def unit(self, cell: str, request: dict) -> bool:
        """One unit (a prompt's conversation, or a batch group) of one cell on its trees →
        whether any tree measured it."""
        trees = self.trees_for(cell)
        if not trees:
            return False
        for attempt in range(REMEASURE + 1):
            order = self.order.next(trees)
            got = {k: self.workers[k].ask({"cell": cell, **request}) for k in order}
            if not any(_disturbed(g) for g in got.values()):
                break
            self.counts["remeasured" if attempt < REMEASURE else "still_disturbed"] += 1
        for k, g in got.items():
            if "turns" in g:
                units = figures(g["turns"], request["prompt"])
            else:
                units = {group_key(request["group"]): _figure(g["batch"])}
            per = self.got[k].setdefault(cell, {})
            for u, f in units.items():
                per.setdefault(u, []).append(f)
        return True

    def run(self, prompts: list, cells: list, groups: int, batch: list, deadline=None) -> bool:
        """Every prompt of every (non-batch) cell, then every group of every batch cell; stops
        early past `deadline` (time.perf_counter()) → whether it finished."""
        from rich.console import Console

        work = [(c, {"prompt": p}) for p in prompts for c in cells]
        work += [(c, {"group": g}) for g in range(groups) for c in batch]
        with progress_bar(Console(stderr=True)) as progress:
            task = progress.add_task("gate A/B", total=len(work))
            for n, (cell, request) in enumerate(work):
                if deadline is not None and time.perf_counter() > deadline:
                    return False
                if self.unit(cell, request) and deadline is not None:
                    self.counts["topup_trios"] += 1
                progress.advance(task)
                if not sys.stderr.isatty() and (n + 1) % 50 == 0:  # CI's log: a line now and then
                    print(f"gate A/B: {n + 1} of {len(work)} units measured", file=sys.stderr)
        return True


def _disturbed(got: dict) -> bool:
    if "batch" in got:
        return bool(got["batch"]["disturbed"])
    return any(d["disturbed"] for d in got["turns"])


def collapse(got: dict) -> dict:
    """{tree: {cell: {unit: figures}}}: a unit's repeats averaged (tokens/s: the geometric mean,
    the mean of the log ratios' own scale) and counted; its ids, tokens and forwards the first
    repeat's (deterministic at T = 0)."""
    out: dict = {}
    for tree, cells in got.items():
        out[tree] = {}
        for cell, units in cells.items():
            out[tree][cell] = {
                u: {
                    **reps[0],
                    "tokens_per_s": math.exp(
                        sum(math.log(r["tokens_per_s"]) for r in reps) / len(reps)
                    ),
                    "repeats": len(reps),
                }
                for u, reps in units.items()
            }
    return out
