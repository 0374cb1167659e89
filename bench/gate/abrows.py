"""The A/B gate's rows, kind by kind, from what the trees' workers built and measured.

    build         a cell the recorded commit (A) builds and the tree under test (B) does not:
                  FAIL, naming B's error (its worker's UserError: a renamed artifact, a broken
                  knob), or "missing" where B has no such method at all
    units         every committed unit (the baseline's outputs) and every unit A measured is
                  measured by B in every cell both built: a unit left out fails
    deterministic per method, its fixed cell (else its speed cell; bench/gate/cells.py): B's ids
                  against the committed ids and, where A ran the cell here, against A's; τ and
                  exact_match against the baseline (bench/gate/rules.py)
    speed         per speed cell, tokens/s and speedup over the tree's own ar, B against A with
                  the threshold from A′ against A (bench/gate/paired.py); Bonferroni over every
                  speed test of the run, batch ones included; and the machine-wide tokens/s row,
                  the median of the speed cells' (every method slower alike)
    batch         per batch cell, aggregate tokens/s (and speedup over ar at the same batch) as
                  above, one unit per batch run's group; each sequence's ids against A's, and
                  the share equal to the batch-1 ar's ids no lower than A's
    dist          per dist cell, B's seeded T = 1 check=distribution: the method drafted past the
                  check's floor and its p-value reaches rows.dist.alpha
    w16           per w16 cell (the 16-bit target), tokens/s and speedup over ar@w16 as above;
                  every unit's ids equal ar@w16's (exact: batch invariant) and A's
    new           a cell only B has: measured at B, reported, not gated

ROWS lists them; one more row kind is one more function there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bench.gate import paired
from bench.gate.cells import deterministic_cell
from bench.gate.rules import Row, Tolerances, check_exact, check_tau, check_tokens, compared_units
from bench.gate.trios import TREES


@dataclass
class Measured:
    ready: dict  # {tree: the worker's ready message}
    got: dict  # {tree: {cell: {unit: figures}}}, repeats collapsed (bench/gate/trios.py)
    entry: dict  # the baseline's entry for this CPU kind (or its first)
    same_kind: bool
    tol: Tolerances
    dist: dict = field(default_factory=dict)  # {tree: {cell: check=distribution's result}}
    dist_alpha: float = 0.001  # the experiment's rows.dist.alpha
    kinds: dict = field(default_factory=dict)  # {cell: kind} of A's and B's cells
    methods: dict = field(default_factory=dict)  # {cell: method}

    def __post_init__(self):
        for k in ("A", "B"):
            for c in self.ready[k]["cells"]:
                self.kinds[c["name"]], self.methods[c["name"]] = c["kind"], c["method"]

    def cells(self, tree: str, kind: str | None = None) -> list[str]:
        return [c["name"] for c in self.ready[tree]["cells"] if kind is None or c["kind"] == kind]

    def trees(self, kind: str) -> dict:
        """{tree: {method: {unit: figures}}} of the cells of one kind (paired.py's shape)."""
        return {
            k: {self.methods[c]: self.got.get(k, {}).get(c, {}) for c in self.cells(k, kind)}
            for k in TREES
            if k in self.ready
        }


def build_rows(m: Measured) -> list[Row]:
    b = set(m.cells("B"))
    rows = []
    for cell in m.cells("A"):
        if cell in b:
            continue
        why = m.ready["B"]["skipped"].get(cell)
        if why is not None:
            rows.append(Row(cell, "build", None, None, f"B could not build it: {why}", "FAIL"))
        else:
            rows.append(Row(cell, "build", None, None, "no such cell at B", "missing"))
    return rows


def unit_rows(m: Measured) -> list[Row]:
    committed = set(m.entry.get("outputs", {}))
    a, b = m.got.get("A", {}), m.got.get("B", {})
    lost, everywhere = [], set(committed)
    for cell in m.cells("B"):
        if m.kinds[cell] in ("batch", "dist") or cell not in m.cells("A"):
            continue
        want = committed | set(a.get(cell, {}))
        lost += [f"{cell} {u}" for u in sorted(want - set(b.get(cell, {})))]
        everywhere &= set(b.get(cell, {}))
    measured = len(everywhere)  # committed units B measured in every cell
    if lost:
        more = " …" if len(lost) > 4 else ""
        rule = f"{len(lost)} not measured at B: " + ", ".join(lost[:4]) + more
        return [Row("all", "units", len(committed), measured, rule, "REGRESSION")]
    rule = f"every committed unit ({len(committed)}) measured at B in every cell"
    return [Row("all", "units", len(committed), measured, rule, "ok")]


def deterministic_rows(m: Measured) -> list[Row]:
    rows = []
    b, a = m.got.get("B", {}), m.got.get("A", {})
    ar_cell = deterministic_cell("ar", b)
    ar = b.get(ar_cell, {}) if ar_cell else {}
    methods = dict.fromkeys(m.methods[c] for c in m.cells("B") if m.kinds[c] in ("speed", "fixed"))
    for method in methods:
        cell = deterministic_cell(method, b)
        if cell is None or cell not in m.cells("A"):
            continue  # new at B: a row of new_rows
        units = b[cell]
        now = {u: {**f, "reference": ar[u]["ids"]} for u, f in units.items() if u in ar}
        keys = compared_units(m.entry["outputs"], now, m.same_kind)
        rows.append(check_tokens(method, m.entry["outputs"], now, keys))
        if a.get(cell) or not m.same_kind:  # A runs a fixed cell only off the baseline's kind
            rows.append(same_as_a(method, a.get(cell, {}), units))
        base = m.entry["methods"].get(method)
        if base is None:
            continue
        rows.append(check_tau(method, base["units"], now, keys, m.tol))
        both = [u for u in keys if u in base["units"]]
        exact = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
        rows.append(
            check_exact(
                method,
                {"exact_match": exact([base["units"][u]["exact"] for u in both])},
                {"exact_match": exact([now[u]["ids"] == now[u]["reference"] for u in both])},
                m.tol,
            )
        )
    return rows


def same_as_a(name: str, a: dict, b: dict) -> Row:
    """B's ids against A's, unit by unit, on this machine."""
    common = sorted(a.keys() & b.keys())
    same = sum(a[u]["ids"] == b[u]["ids"] for u in common)
    rule = f"all {len(common)} units equal the recorded commit's ids measured here"
    ok = common and same == len(common)
    frac = same / len(common) if common else None
    return Row(name, "tokens_vs_A", 1.0, frac, rule, "ok" if ok else "REGRESSION")


def speed_tests(m: Measured) -> int:
    return sum(len(paired.tests_of(m.trees(kind))) for kind in ("speed", "batch", "w16"))


def speed_rows(m: Measured) -> list[Row]:
    trees, tests = m.trees("speed"), speed_tests(m) + 1
    every = paired.machine_row(trees, m.tol.speedup_tol, tests)
    return paired.checks(trees, m.tol.speedup_tol, tests) + ([every] if every else [])


def batch_rows(m: Measured) -> list[Row]:
    trees = m.trees("batch")
    rows = []
    cell_of = {m.methods[c]: c for c in m.cells("B", "batch")}
    for r in paired.checks(trees, m.tol.speedup_tol, speed_tests(m)):
        r.method = cell_of.get(r.method, r.method)
        rows.append(r)
    groups = m.ready["B"].get("groups") or []
    ar = m.got.get("B", {}).get(deterministic_cell("ar", m.got.get("B", {})) or "", {})
    ar_a = m.got.get("A", {}).get(deterministic_cell("ar", m.got.get("A", {})) or "", {})
    for cell in m.cells("B", "batch"):
        a, b = m.got.get("A", {}).get(cell, {}), m.got.get("B", {}).get(cell, {})
        if cell not in m.cells("A"):
            continue
        rows.append(same_as_a(cell, a, b))
        was, now = batch1_share(a, ar_a, groups), batch1_share(b, ar, groups)
        rule = "–" if was is None else f"sequences equal to the batch-1 ar's ids ≥ A's ({was:.2f})"
        bad = now is None or (was is not None and now < was - 1e-9)
        rows.append(Row(cell, "exact_match", was, now, rule, "REGRESSION" if bad else "ok"))
    return rows


def batch1_share(units: dict, ar: dict, groups: list[list[str]]) -> float | None:
    """Share of a batch cell's sequences whose ids equal the batch-1 ar's for that first turn."""
    pairs = []
    for g, prompts in enumerate(groups):
        f = units.get(f"group{g}")
        if f is None:
            continue
        for p, ids in zip(prompts, f["ids"], strict=False):
            ref = ar.get(f"{p}/0")
            if ref is not None:
                pairs.append(ids == ref["ids"])
    return sum(pairs) / len(pairs) if pairs else None


def w16_rows(m: Measured) -> list[Row]:
    """The 16-bit target's cells: speed rows (renamed to the cells), then each cell's ids
    against ar@w16's on B, unit by unit, and against A's where A built the cell."""
    cell_of = {m.methods[c]: c for c in m.cells("B", "w16")}
    rows = []
    for r in paired.checks(m.trees("w16"), m.tol.speedup_tol, speed_tests(m)):
        r.method = cell_of.get(r.method, r.method)
        rows.append(r)
    b = m.got.get("B", {})
    ar = b.get(cell_of.get("ar", ""), {})
    for cell in m.cells("B", "w16"):
        units = b.get(cell, {})
        if cell in m.cells("A"):
            rows.append(same_as_a(cell, m.got.get("A", {}).get(cell, {}), units))
        if m.methods[cell] == "ar" or not ar:
            continue
        common = sorted(units.keys() & ar.keys())
        same = sum(units[u]["ids"] == ar[u]["ids"] for u in common)
        frac = same / len(common) if common else None
        rule = f"all {len(common)} units equal ar@w16's ids (a batch-invariant kernel)"
        ok = bool(common) and same == len(common)
        rows.append(Row(cell, "exact_match", 1.0, frac, rule, "ok" if ok else "REGRESSION"))
    return rows


def dist_rows(m: Measured) -> list[Row]:
    alpha, rows = m.dist_alpha, []
    for cell in m.cells("B", "dist"):
        b, a = m.dist.get("B", {}).get(cell), m.dist.get("A", {}).get(cell)
        if b is None:
            continue
        was = a["pvalue"] if a else None
        if b["status"] != "tested":
            rule = f"drafted {b['drafted']} tokens < the floor {b['floor']}: untested"
            rows.append(Row(cell, "distribution", was, None, rule, "REGRESSION"))
            continue
        rule = f"p ≥ {alpha:g} at T = 1, seeded ({b['drafted']} drafted tokens ≥ {b['floor']})"
        verdict = "ok" if b["pvalue"] >= alpha else "REGRESSION"
        rows.append(Row(cell, "distribution", was, b["pvalue"], rule, verdict))
    return rows


def new_rows(m: Measured) -> list[Row]:
    rows = []
    a = set(m.cells("A"))
    for cell in m.cells("B"):
        if cell in a or m.kinds[cell] == "dist":
            continue
        units = m.got.get("B", {}).get(cell, {})
        tps = [f["tokens_per_s"] for f in units.values()]
        geo = math.exp(sum(map(math.log, tps)) / len(tps)) if tps else None
        rule = "not at the recorded commit: measured at B, not gated"
        rows.append(Row(cell, "tokens_per_s", None, geo, rule, "new"))
    return rows


ROWS = (
    build_rows, unit_rows, deterministic_rows, speed_rows, batch_rows, w16_rows, dist_rows,
    new_rows,
)  # fmt: skip


def all_rows(m: Measured) -> list[Row]:
    return [r for make in ROWS for r in make(m)]
