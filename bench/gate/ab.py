"""`make gate`: the recorded commit (A) and the tree under test (B) measured side by side in one
job, on the machine at hand, whatever its CPU kind.

    python -m bench.gate                         # A/B against the baseline's recorded commit
    python -m bench.gate --plant-delay 20        # self-test: B's target forwards sleep 20 ms

The baseline file names one commit (`commit`, written by --update from a clean tree). Here that
commit is checked out in a git worktree; three long-lived workers (bench/gate/worker.py) start:
A and A′ in that worktree, B in this tree, each with its own pinned experiment, its own native
build (cached by source hash) and its engine loaded once. Every unit (prompt × turn) of every
method is measured once per worker, the order alternating unit by unit (A B A′, then A′ B A), so
that drift over the job cancels; a unit that other work disturbed in any of the three is
measured again (up to `remeasure` times) and counted. Verdicts:
  - speed (bench/gate/paired.py): B against A from paired per-unit ratios, for each method's
    tokens/s and its speedup over its own ar; the threshold from A′ against A;
  - deterministic (bench/gate/rules.py, as before): B's ids against the committed ids, τ and
    exact_match against the baseline; and B's ids against A's, unit by unit, on this machine.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.gate import paired
from bench.gate.rules import (
    Row,
    Tolerances,
    check_exact,
    check_tau,
    check_tokens,
    compared_units,
    env_problems,
)
from bench.gate.table import print_table
from bench.gate.units import unit_key
from groundfloor.errors import UserError
from groundfloor.paths import ROOT

TREES = ("A", "B", "A′")
REMEASURE = 2  # extra tries of a unit that other work disturbed


class Worker:
    """One tree's worker process: JSON lines in, JSON lines out (bench/gate/worker.py)."""

    def __init__(
        self, name: str, root: Path, experiment: Path, extra: list[str], log: Path, delay_ms=0.0
    ):
        from bench.gate.worker import PROTOCOL

        self.name, self.log = name, log
        cmd = [sys.executable, "-m", "bench.gate.worker", "--experiment", str(experiment), *extra]
        if delay_ms:
            cmd += ["--delay-ms", str(delay_ms)]
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
            raise UserError(
                f"the {name} worker speaks gate protocol {self.ready.get('protocol')}, this gate "
                f"{PROTOCOL}: re-record the baseline (python -m bench.gate --update) on this tree"
            )
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

    def run(self, method: str, prompt: str) -> list[dict]:
        self.proc.stdin.write(json.dumps({"method": method, "prompt": prompt}) + "\n")
        self.proc.stdin.flush()
        return self._read()["turns"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"quit": true}\n')
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


def git(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


@contextmanager
def recorded_tree(commit: str, where: Path):
    """The recorded commit checked out in a git worktree under `where`, removed afterwards."""
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode:
        raise UserError(
            f"the baseline's recorded commit {commit[:12]} is not in this clone (a shallow "
            "clone? `git fetch --unshallow`), or re-record the baseline here"
        )
    path = where / "A"
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
        yield path
    finally:
        git("worktree", "remove", "--force", str(path))
        git("worktree", "prune")


def figures(turns: list[dict], prompt: str) -> dict[str, dict]:
    """{unit: {tokens_per_s, new_tokens, forwards, ids}} of one conversation's turns."""
    return {
        unit_key(prompt, t): {
            "tokens_per_s": d["new_tokens"] / (d["wall_ns"] / 1e9),
            "new_tokens": d["new_tokens"],
            "forwards": d["forwards"],
            "ids": d["ids"],
        }
        for t, d in enumerate(turns)
    }


def measure(
    workers: dict[str, Worker], methods: list[str], prompts: list[str]
) -> tuple[dict, dict]:
    """({tree: {method: {unit: figures}}}, counts of disturbed trios): every (prompt, method)
    once per tree, the order alternating (A B A′, A′ B A) from one trio to the next."""
    from rich.console import Console

    from groundfloor.progress import progress_bar

    got: dict = {k: {m: {} for m in methods} for k in TREES}
    counts = {"remeasured": 0, "still_disturbed": 0}
    with progress_bar(Console(stderr=True)) as progress:
        task = progress.add_task("gate A/B", total=len(prompts) * len(methods))
        i = 0
        for prompt in prompts:
            for method in methods:
                order = TREES if i % 2 == 0 else TREES[::-1]
                for attempt in range(REMEASURE + 1):
                    trio = {k: workers[k].run(method, prompt) for k in order}
                    disturbed = any(d["disturbed"] for turns in trio.values() for d in turns)
                    if not disturbed:
                        break
                    counts["remeasured" if attempt < REMEASURE else "still_disturbed"] += 1
                for k, turns in trio.items():
                    got[k][method].update(figures(turns, prompt))
                i += 1
                progress.advance(task)
            if not sys.stderr.isatty():  # a log file or CI: one plain line per prompt
                print(f"gate A/B: prompt {prompt} measured on every tree", file=sys.stderr)
    return got, counts


def deterministic_rows(entry: dict, got: dict, same_kind: bool, tol: Tolerances) -> list[Row]:
    """tokens, τ and exact_match of B against the baseline entry (as the gate always checked),
    and B's ids against A's on this machine."""
    rows = []
    ar = got["B"].get("ar", {})
    for m, units in got["B"].items():
        now = {u: {**f, "reference": ar[u]["ids"]} for u, f in units.items() if u in ar}
        keys = compared_units(entry["outputs"], now, same_kind)
        rows.append(check_tokens(m, entry["outputs"], now, keys))
        a = got["A"].get(m, {})
        common = sorted(a.keys() & units.keys())
        same = sum(a[u]["ids"] == units[u]["ids"] for u in common)
        rule = f"all {len(common)} units equal the recorded commit's ids measured here"
        ok = common and same == len(common)
        rows.append(
            Row(
                m,
                "tokens_vs_A",
                1.0,
                same / len(common) if common else None,
                rule,
                "ok" if ok else "REGRESSION",
            )
        )
        base = entry["methods"].get(m)
        if base is None:
            continue
        rows.append(check_tau(m, base["units"], now, keys, tol))
        both = [u for u in keys if u in base["units"]]
        exact = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
        rows.append(
            check_exact(
                m,
                {"exact_match": exact([base["units"][u]["exact"] for u in both])},
                {"exact_match": exact([now[u]["ids"] == now[u]["reference"] for u in both])},
                tol,
            )
        )
    return rows


def gate_ab(exp: dict, base: dict, extra: list[str], out: Path | None, delay_ms: float) -> int:
    tol = Tolerances.from_dict(exp)
    commit = base.get("commit")
    if not commit:
        raise UserError(
            f"{exp['baseline_path']} names no recorded commit (a baseline from before the A/B "
            "gate): re-record it with `python -m bench.gate --update` on a clean tree and commit it"
        )
    start = time.perf_counter()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="specsweep-gate-")))
        logs = out or tmp
        logs.mkdir(parents=True, exist_ok=True)
        tree_a = stack.enter_context(recorded_tree(commit, tmp))
        exp_path = Path(exp["path"]).resolve()
        exp_a = tree_a / exp_path.relative_to(ROOT) if exp_path.is_relative_to(ROOT) else exp_path
        workers = {}
        for k, root, e in (("A", tree_a, exp_a), ("B", ROOT, exp_path), ("A′", tree_a, exp_a)):
            log = logs / f"worker-{'A2' if k == 'A′' else k}.log"
            workers[k] = Worker(k, root, e, extra, log, delay_ms if k == "B" else 0.0)
            stack.callback(workers[k].close)
            print(f"worker {k}: {workers[k].ready['env'].get('git_sha')} ready", file=sys.stderr)
        a, b = workers["A"].ready, workers["B"].ready
        methods = [m for m in b["methods"] if m in a["methods"]]
        prompts = [p for p, _ in b["prompts"] if [p, _] in a["prompts"]]
        got, counts = measure(workers, methods, prompts)
    for k, w in (("A", a), ("B", b)):  # methods one side could not run
        for m in w["methods"]:
            got[k].setdefault(m, {})
    got = {k: {m: u for m, u in v.items() if u or k != "A′"} for k, v in got.items()}
    took = time.perf_counter() - start
    if out:
        (out / "figures.json").write_text(json.dumps({"A": a, "B": b, "figures": got}) + "\n")
    kind = b["env"].get("cpu_kind")
    entry = base["machines"].get(kind)
    same_kind = entry is not None
    entry = entry or next(iter(base["machines"].values()))
    rows = deterministic_rows(entry, got, same_kind, tol) + paired.speed_rows(
        {k: {m: u for m, u in got[k].items() if u} for k in TREES}, tol.speedup_tol
    )
    rows.sort(key=lambda r: list(got["B"]).index(r.method) if r.method in got["B"] else 99)
    print_table(
        rows,
        f"gate A/B: A = {commit[:12]} (recorded), B = {b['env'].get('git_sha')} (this tree), "
        f"{kind} · {took:.0f} s",
    )
    blocking, notes = env_problems(a["env"], b["env"])
    if not same_kind:
        notes.append(
            f"the committed ids were recorded on {', '.join(base['machines'])}: units whose ar "
            "stream differs here are left out of the tokens check (tokens_vs_A checks them all)"
        )
    if counts["remeasured"] or counts["still_disturbed"]:
        notes.append(
            f"other work disturbed {counts['remeasured']} measurements of a unit's trio, each "
            f"measured again; {counts['still_disturbed']} trios still disturbed after {REMEASURE} "
            "tries (kept, flagged)"
        )
    for m, why in b["skipped"].items():
        notes.append(f"skipped {m} at B: {why}")
    for n in notes:
        print(f"note: {n}")
    return verdict(rows, blocking, got, tol)


def verdict(rows: list[Row], blocking: list[str], got: dict, tol: Tolerances) -> int:
    trees = {k: {m: u for m, u in got[k].items() if u} for k in TREES}
    false, caught = paired.simulate(trees, tol.speedup_tol)
    if caught:
        worst = min(caught, key=caught.get)
        print(
            f"from this run's own units (1,000 simulated gate runs): false alarms {false:.1%} of "
            f"runs, all methods together; a {tol.speedup_tol:.0%} slowdown of one method caught in "
            f"{min(caught.values()):.1%}–{max(caught.values()):.1%} (lowest: {worst[0]} {worst[1]})"
        )
    failed = sorted({r.method for r in rows if r.failed})
    if blocking:
        print("FAIL: the two trees did not run the same thing (" + "; ".join(blocking) + ")")
        return 1
    if failed:
        print(f"FAIL: regression in {', '.join(failed)}")
        return 1
    weak = sorted({r.method for r in rows if r.verdict == "underpowered"})
    if weak:
        print(f"PASS (speed underpowered, too noisy to judge: {', '.join(weak)})")
    else:
        print("PASS" if not math.isnan(false) else "PASS (no speed compared)")
    return 0
