"""`make gate`: the recorded commit (A) and the tree under test (B) measured side by side in one
job, on the machine at hand, whatever its CPU kind.

    python -m bench.gate                           # A/B against the baseline's recorded commit
    python -m bench.gate --plant-slowdown 0.15     # self-test: every B turn 15% slower (must fail)
    python -m bench.gate --self                    # A against itself: B a second checkout of A

The baseline file names one commit (`commit`, written by --update from a clean tree). Here that
commit is checked out in a git worktree; three long-lived workers (bench/gate/worker.py) start:
A and A′ in that worktree, B in this tree (with --self: in a second worktree of the commit). All
three run the recorded commit's experiment (its gate.yaml, prompts and tolerances: a change
cannot loosen its own gate or drop units; where B's own experiment differs, the verdict names
the differences), each with its own native build (cached by source hash) and its engine loaded
once. The cells (bench/gate/cells.py): every method as users run it (speed, trios A B A′), its
pinned config where that differs (fixed: deterministic, B once, and A once on a CPU kind the
baseline has no entry for), a few methods at batch=B (trios of batch runs), a chain and a tree
method's seeded T = 1 check on B. The order of trees rotates so that drift cancels and no tree runs
twice in a row (bench/gate/trios.py). A speed row that is underpowered after the pass is topped up:
its units measured again by the three trees, within `topup_s` seconds, repeats averaged into the
unit. Where the only failed rows are speed rows, their cells are measured again by fresh workers
of the three trees (bench/gate/confirm.py): a row passes only where the fresh trio clears it. Rows:
bench/gate/abrows.py; verdict line and JSON: bench/gate/verdict.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import yaml

from bench.gate import abrows, confirm, paired
from bench.gate.cells import KINDS, TIMED, ar_cell, rows_of
from bench.gate.experiment import load_experiment
from bench.gate.rules import Tolerances, env_problems
from bench.gate.table import print_table
from bench.gate.trios import REMEASURE, TREES, Measurer, collapse
from bench.gate.verdict import headline, simulated_line, write_json
from bench.gate.worker import PROTOCOL
from groundfloor.errors import UserError
from groundfloor.paths import ROOT

TOPUP_S = 120.0  # seconds of top-up trios when the experiment names none


class Worker:
    """One tree's worker process: JSON lines in, JSON lines out (bench/gate/worker.py)."""

    def __init__(self, name: str, root: Path, experiment: Path, extra: list[str], log: Path,
                 kinds: str, plant: float = 0.0):  # fmt: skip
        self.name, self.log = name, log
        cmd = [sys.executable, "-m", "bench.gate.worker", "--experiment", str(experiment)]
        cmd += ["--kinds", kinds, *(["--plant-slowdown", str(plant)] if plant else []), *extra]
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
        )
        self.proc = subprocess.Popen(
            cmd,
            cwd=root,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
        )
        self.ready = self._read()
        if self.ready.get("protocol") != PROTOCOL:
            raise UserError(refused(name, self.ready.get("protocol")))
        if Path(self.ready["root"]).resolve() != root.resolve():
            raise UserError(
                f"the {name} worker ran the code of {self.ready['root']}, not of {root}"
            )

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            tail = self.log.read_text().strip().splitlines()[-8:]
            raise UserError(
                f"the {self.name} gate worker stopped (exit {self.proc.returncode}); the end of "
                f"{self.log}:\n  " + "\n  ".join(tail)
            )
        return json.loads(line)

    def ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"quit": true}\n')
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


def refused(name: str, protocol) -> str:
    return (
        f"the {name} tree's gate worker speaks protocol {protocol}, this gate {PROTOCOL}: "
        "re-record the baseline (python -m bench.gate --update on a clean tree, then commit it)"
    )


def check_protocol(tree: Path) -> None:
    """Refuse a recorded commit whose worker speaks another protocol before starting it (an old
    worker would not even parse this gate's arguments)."""
    text = (tree / "bench" / "gate" / "worker.py").read_text()
    found = re.search(r"^PROTOCOL = (\d+)", text, re.M)
    protocol = int(found.group(1)) if found else None
    if protocol != PROTOCOL:
        raise UserError(refused("recorded", protocol))


def git(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


@contextmanager
def recorded_tree(commit: str, where: Path, name: str = "A"):
    """The recorded commit checked out in a git worktree under `where`, removed afterwards."""
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode:
        raise UserError(
            f"the baseline's recorded commit {commit[:12]} is not in this clone (a shallow "
            "clone? `git fetch --unshallow`), or re-record the baseline here"
        )
    path = where / name
    made = git("worktree", "add", "--detach", "--quiet", str(path), commit)
    if made.returncode:
        raise UserError(f"git worktree add {commit[:12]} failed: {made.stderr.strip()}")
    try:
        if not (path / "bench" / "gate" / "worker.py").exists():
            raise UserError(
                f"the recorded commit {commit[:12]} has no gate worker (bench/gate/worker.py): "
                "re-record the baseline with `python -m bench.gate --update` on a commit that has "
                "one"
            )
        check_protocol(path)
        yield path
    finally:
        git("worktree", "remove", "--force", str(path))
        git("worktree", "prune")


def in_tree(path: Path, tree: Path) -> Path:
    """This tree's file `path` as it lies in another checkout `tree`."""
    path = path.resolve()
    return tree / path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def differences(recorded: Path, own: Path) -> list[str]:
    """What B's own experiment (and its prompts file) changes against the recorded commit's,
    which judged both trees."""
    if not own.exists():
        return [f"B has no {own.name}: the recorded commit's was used"]
    a, b = (yaml.safe_load(p.read_text()) or {} for p in (recorded, own))
    out = [
        f"{key}: recorded {a.get(key)!r}, B's own {b.get(key)!r}"
        for key in sorted(a.keys() | b.keys())
        if a.get(key) != b.get(key)
    ]
    try:
        files = [load_experiment(p)["run_overrides"] for p in (recorded, own)]
    except UserError as e:
        return [*out, f"B's own experiment does not load ({e})"]
    paths = [
        next((Path(o.split("=", 1)[1]) for o in f if o.startswith("task.path=")), None)
        for f in files
    ]
    read = [p.read_bytes() if p and p.exists() else None for p in paths]
    if read[0] != read[1]:
        name = paths[1].name if paths[1] else "–"
        out.append(f"prompts: B's own {name} differs from the recorded one")
    return out


def start(stack, trees: dict[str, Path], experiment: Path, extra, logs, plant, fresh=False):
    """The three trees' workers (fresh: the confirmation's, speed and batch cells only)."""
    workers = {}
    for k in TREES:
        log = logs / f"worker-{'A2' if k == 'A′' else k}{'-fresh' if fresh else ''}.log"
        kinds = ",".join(TIMED) if k == "A′" or fresh else ",".join(KINDS)
        name = f"fresh {k}" if fresh else k
        w = Worker(name, trees[k], experiment, extra, log, kinds, plant if k == "B" else 0.0)
        workers[k] = w
        stack.callback(w.close)
        print(f"worker {name}: {w.ready['env'].get('git_sha')} ready", file=sys.stderr)
    return workers


def gate_ab(own: dict, base: dict, extra: list[str], out: Path | None, plant: float = 0.0,
            self_test: bool = False, json_path: Path | None = None,
            plant_once: bool = False) -> int:  # fmt: skip
    commit = base.get("commit")
    if not commit:
        raise UserError(
            f"{own['baseline_path']} names no recorded commit (a baseline from before the A/B "
            "gate): re-record it with `python -m bench.gate --update` on a clean tree and commit it"
        )
    began = time.perf_counter()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="specsweep-gate-")))
        logs = out or tmp
        logs.mkdir(parents=True, exist_ok=True)
        tree_a = stack.enter_context(recorded_tree(commit, tmp))
        tree_b = stack.enter_context(recorded_tree(commit, tmp, "B")) if self_test else ROOT
        exp_a = in_tree(own["path"], tree_a)
        exp = load_experiment(exp_a)  # the recorded commit's experiment judges both trees
        tol = Tolerances.from_dict(exp)
        diffs = differences(exp_a, in_tree(own["path"], tree_b))
        trees = {"A": tree_a, "B": tree_b, "A′": tree_a}
        workers = start(stack, trees, exp_a, extra, logs, plant)
        ready = {k: w.ready for k, w in workers.items()}
        kinds = {k: {c["name"]: c["kind"] for c in r["cells"]} for k, r in ready.items()}
        kind = ready["B"]["env"].get("cpu_kind")
        entry = base["machines"].get(kind)
        same_kind = entry is not None
        entry = entry or next(iter(base["machines"].values()))
        # on the baseline's CPU kind the committed ids are A's own: B alone runs the fixed cells
        m = Measurer(workers, kinds, ("B",) if same_kind else ("A", "B"))
        b_prompts = {p for p, _ in ready["B"]["prompts"]}
        prompts = [p for p, _ in ready["A"]["prompts"] if p in b_prompts]
        single = [c["name"] for c in ready["B"]["cells"] if c["kind"] in ("speed", "fixed", "w16")]
        batch = [c["name"] for c in ready["B"]["cells"] if c["kind"] == "batch"]
        m.run(prompts, single, len(ready["B"]["groups"]), batch)
        dist = distribution_checks(workers, kinds)
        alpha = rows_of(exp)["dist"]["alpha"]

        def measured():
            return abrows.Measured(ready, collapse(m.got), entry, same_kind, tol, dist, alpha)

        budget = float(exp.get("topup_s", TOPUP_S))
        rows, topup_s = top_up(m, measured, prompts, single, batch, ready["B"], budget)
        restart = partial(start, stack, trees, exp_a, extra, logs, 0.0 if plant_once else plant,
                          fresh=True)  # fmt: skip
        rows, confirmed, fresh = confirmation(
            rows, workers, restart, prompts, len(ready["B"]["groups"]),
            lambda r, got: abrows.Measured(r, got, entry, same_kind, tol), budget,
        )  # fmt: skip
    took = time.perf_counter() - began
    got = collapse(m.got)
    if out:
        doc = {"ready": ready, "figures": got, "confirmation": fresh}
        (out / "figures.json").write_text(json.dumps(doc) + "\n")
    blocking, notes = env_problems(ready["A"]["env"], ready["B"]["env"])
    notes += [f"B's own experiment differs (the recorded one judged both): {d}" for d in diffs]
    if not same_kind:
        notes.append(
            f"the committed ids were recorded on {', '.join(base['machines'])}: units whose ar "
            "stream differs here are left out of the tokens check (tokens_vs_A checks them all)"
        )
    notes += measuring_notes(m.counts, topup_s, budget, ready["A"]["skipped"], plant) + confirmed
    notes += ["planted in the first B process only: the fresh B runs unplanted"] * plant_once
    order = {c["name"]: i for i, c in enumerate(ready["B"]["cells"] + ready["A"]["cells"])}
    rows.sort(key=lambda r: order.get(r.method, order.get(r.method.split("@")[0], -1)))
    code, line = headline(rows, blocking)
    print(line)
    title = (
        f"gate A/B: A = {commit[:12]} (recorded), B = {ready['B']['env'].get('git_sha')} "
        f"({'a second checkout of A' if self_test else 'this tree'}), {kind} · {took:.0f} s"
    )
    print_table(rows, title)
    for n in notes:
        print(f"note: {n}")
    trees_speed = abrows.Measured(ready, got, entry, same_kind, tol).trees("speed")
    sim = simulated_line(trees_speed, tol.speedup_tol)
    if sim:
        print(sim)
    print(line)
    doc = {
        "line": line,
        "exit": code,
        "recorded": commit,
        "tree": ready["B"]["env"].get("git_sha"),
        "self": self_test,
        "plant_slowdown": plant,
        "cpu_kind": kind,
        "seconds": round(took, 1),
        "topup_seconds": round(topup_s, 1),
        "notes": notes,
        "experiment_differences": diffs,
    }
    for path in [p for p in (json_path, out / "verdict.json" if out else None) if p]:
        write_json(path, doc, rows)
    return code


def confirmation(rows, workers: dict, restart, prompts, groups: int, measured, budget: float):
    """Failed speed rows judged again by a fresh trio (bench/gate/confirm.py): the first trio's
    workers closed, restart() starting the fresh ones → (rows, notes, {ready, figures} of the
    fresh trio; empty where nothing was confirmed)."""
    cells = confirm.cells_to_confirm(rows, workers["B"].ready)
    if not cells:
        return rows, [], {}
    began = time.perf_counter()
    for w in workers.values():
        w.close()  # the first trio's processes: done
    fresh = restart()
    ready = {k: confirm.only(w.ready, cells) for k, w in fresh.items()}
    kinds = {k: {c["name"]: c["kind"] for c in r["cells"]} for k, r in ready.items()}
    m = Measurer(fresh, kinds, ("B",))
    single = [c for c, kind in kinds["B"].items() if kind in ("speed", "w16")]
    batch = [c for c, kind in kinds["B"].items() if kind == "batch"]
    m.run(prompts, single, groups, batch)
    again, _ = top_up(m, lambda: measured(ready, collapse(m.got)), prompts, single, batch,
                      ready["B"], budget)  # fmt: skip
    judged = confirm.judge(rows, again)
    took = time.perf_counter() - began
    return judged, confirm.notes(cells, judged, took), {"ready": ready, "figures": collapse(m.got)}


def top_up(m, measured, prompts, single, batch, ready_b: dict, budget: float):
    """Extra trios on the units of rows still underpowered, within `budget` seconds (a unit's
    repeats averaged into it, bench/gate/trios.py) → (the rows after it, seconds it took)."""
    rows = abrows.all_rows(measured())
    began = time.perf_counter()
    deadline = began + budget
    while (weak := weak_cells(rows, ready_b)) and time.perf_counter() < deadline:
        cells = [c for c in single if c in weak]
        before = m.counts["topup_trios"]
        finished = m.run(prompts, cells, len(ready_b["groups"]),
                         [c for c in batch if c in weak], deadline)  # fmt: skip
        rows = abrows.all_rows(measured())
        if not finished or m.counts["topup_trios"] == before:
            break
    return rows, time.perf_counter() - began if m.counts["topup_trios"] else 0.0


def measuring_notes(counts: dict, topup_s: float, budget: float, skipped_a: dict, plant: float):
    """The verdict's notes on how the units were measured: re-measured, topped up, planted."""
    notes = []
    if counts["remeasured"] or counts["still_disturbed"]:
        notes.append(
            f"other work disturbed {counts['remeasured']} measurements of a unit, each "
            f"measured again; {counts['still_disturbed']} still disturbed after {REMEASURE} "
            "tries (kept, flagged)"
        )
    if counts["topup_trios"]:
        notes.append(
            f"top-up: {counts['topup_trios']} units of underpowered rows measured again in "
            f"{topup_s:.0f} s of {budget:.0f} s (repeats averaged into each unit)"
        )
    for cell, why in skipped_a.items():
        notes.append(f"not built at the recorded commit either: {cell}: {why}")
    if plant:
        notes.append(f"planted: every B turn and batch run {plant:.0%} slower inside its clock")
    return notes


def distribution_checks(workers: dict, kinds: dict) -> dict:
    """{"B": {cell: result}}: each dist cell's seeded check=distribution on B (untimed, once: at
    T = 1 with one seed it is deterministic; B's p alone is judged, and A's would cost as much
    again: 90 s a cell on the 2-core Xeon model 207)."""
    return {
        "B": {
            cell: workers["B"].ask({"cell": cell, "dist": True})["dist"]
            for cell, kind in kinds.get("B", {}).items()
            if kind == "dist"
        }
    }


def weak_cells(rows, ready_b: dict) -> set[str]:
    """The cells whose speed rows are underpowered (a speedup row's ar at the same batch too)."""
    kinds = {c["name"]: c["kind"] for c in ready_b["cells"]}
    out = set()
    for r in rows:
        if r.verdict != "underpowered" or r.metric not in paired.METRICS:
            continue
        out.add(r.method)
        if r.metric == "speedup":
            out.add(ar_cell(r.method))
    return {c for c in out if c in kinds}
