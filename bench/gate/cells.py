"""The A/B gate's cells: what each tree's worker builds and measures, by row kind.

    speed   a method as users run it (its default config: k=auto for the eight methods whose
            default it is, their automatic trees): tokens/s and speedup over its own ar, from
            paired trios A B A′ over every unit (bench/gate/paired.py). Name: the method.
    fixed   the method pinned as the baseline records it (k=auto → its fixed_k, tree methods
            without one: the whole tree; the experiment's method_overrides): deterministic only,
            ids, τ and exact_match from one A run and one B run. Only where the pinned config
            differs from the speed cell's, or the method has no speed row (oracle, an upper
            bound): elsewhere the speed cell's first A and B runs are the deterministic ones.
            Name: "<method>@fixed".
    batch   a method at batch=B (the experiment's `rows.batch`): aggregate tokens/s of whole
            batch runs, paired trios over `runs` fixed groups of B first turns, and each
            sequence's ids against A's and against the batch-1 ar. Name: "<method>@b<B>".
    w16     a method as users run it on the embedded model's 16-bit copy (the experiment's
            `rows.w16`: its overrides, e.g. model.weights=bfloat16 model.kernel=native_bf16,
            and per method its own, e.g. draft's model.draft=self:int4): tokens/s and speedup
            over ar on the same target from trios, as the speed cells; each unit's ids equal
            that ar's (the bf16 kernel is batch invariant) and A's. Name: "<method>@w16".
    dist    a method pinned as its fixed cell, sampled at T = 1 with the run's seed:
            check=distribution (bench.run.distcheck: drafting forced, a drafting floor) once
            per tree, untimed; B's p-value must reach `alpha` and B must draft past the floor
            (`rows.dist`: a chain and a tree method). Name: "<method>@t1".

One more row kind is one more entry of KINDS, a branch in `cells`, and its requests in the worker
and its rows in bench/gate/abrows.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from groundfloor.errors import UserError

KINDS = ("speed", "fixed", "batch", "dist", "w16")
TIMED = ("speed", "batch", "w16")  # measured in trios A B A′ (fixed and dist: B, or A once)


@dataclass(frozen=True)
class Cell:
    name: str
    kind: str  # one of KINDS
    method: str
    overrides: tuple[str, ...]  # after the experiment's own
    pin: bool  # k=auto → fixed_k (gate_config)


def rows_of(exp: dict) -> dict:
    """The experiment's `rows` block, checked: {speed: {skip}, batch: {methods, batch, runs},
    dist: {methods, alpha}}."""
    rows = exp.get("rows") or {}
    if not isinstance(rows, dict) or set(rows) - set(KINDS):
        raise UserError(f"{exp['path']}: 'rows' must map some of {', '.join(KINDS)} to settings")
    speed = rows.get("speed") or {}
    batch = rows.get("batch") or {}
    dist = rows.get("dist") or {}
    w16 = rows.get("w16") or {}
    out = {
        "speed": {"skip": [str(m) for m in speed.get("skip", [])]},
        "batch": {
            "methods": [str(m) for m in batch.get("methods", [])],
            "batch": int(batch.get("batch", 4)),
            "runs": int(batch.get("runs", 8)),
        },
        "dist": {
            "methods": [str(m) for m in dist.get("methods", [])],
            "alpha": float(dist.get("alpha", 0.001)),
        },
        "w16": {
            "methods": [str(m) for m in w16.get("methods", [])],
            "overrides": [str(o) for o in w16.get("overrides", [])],
            "method_overrides": {
                str(m): [str(o) for o in v] for m, v in (w16.get("method_overrides") or {}).items()
            },
        },
    }
    if not 0 < out["dist"]["alpha"] < 1:
        raise UserError(
            f"{exp['path']}: rows.dist.alpha={out['dist']['alpha']}: give a number in (0, 1)"
        )
    if out["batch"]["methods"] and (out["batch"]["batch"] < 2 or out["batch"]["runs"] < 2):
        raise UserError(
            f"{exp['path']}: rows.batch needs batch ≥ 2 and runs ≥ 2 (got batch="
            f"{out['batch']['batch']}, runs={out['batch']['runs']})"
        )
    return out


def cells(exp: dict, methods: list[str], differs) -> list[Cell]:
    """Every cell of the experiment, in measuring order. differs(method) → whether the pinned
    config is not the default one (the worker composes both to tell)."""
    rows = rows_of(exp)
    per = exp["method_overrides"]
    out = []
    for m in methods:
        if m not in rows["speed"]["skip"]:
            out.append(Cell(m, "speed", m, (), False))
    for m in methods:
        if m in rows["speed"]["skip"] or m in per or differs(m):
            out.append(Cell(f"{m}@fixed", "fixed", m, tuple(per.get(m, [])), True))
    b = rows["batch"]
    for m in b["methods"]:
        if m in methods:
            out.append(Cell(f"{m}@b{b['batch']}", "batch", m, (f"batch={b['batch']}",), False))
    for m in rows["dist"]["methods"]:
        if m in methods:
            sampled = (*per.get(m, []), "temperature=1", "check=distribution")
            out.append(Cell(f"{m}@t1", "dist", m, sampled, True))
    w16 = rows["w16"]
    for m in w16["methods"]:
        if m in methods:
            extra = (*w16["overrides"], *w16["method_overrides"].get(m, []))
            out.append(Cell(f"{m}@w16", "w16", m, extra, False))
    return out


def deterministic_cell(method: str, names) -> str | None:
    """The cell whose ids, τ and exact_match stand for `method` (its fixed cell, else its
    speed cell), among `names`."""
    for name in (f"{method}@fixed", method):
        if name in names:
            return name
    return None


def ar_cell(cell: str) -> str:
    """The ar cell a speed or batch cell's speedup row divides by: ar at the same batch."""
    batch = cell.partition("@")[2]
    return f"ar@{batch}" if batch else "ar"
