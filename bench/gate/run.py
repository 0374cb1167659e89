"""CI regression gate: run the pinned experiment, compare with the committed baseline, exit 1 on
a drop.

    python -m bench.gate                     # make gate: the recorded commit beside this tree (A/B)
    python -m bench.gate --quick             # make gate-quick: vs this CPU kind's recorded entry
    python -m bench.gate --plant-slowdown 0.15   # self-test: every B turn 15% slower must fail
    python -m bench.gate --plant-slowdown 0.15 --plant-once   # only the first B process slower:
                                             # the confirmation's fresh B clears it (exit 0)
    python -m bench.gate --self              # A against itself (B: a second checkout of A)
    python -m bench.gate --json v.json       # also write the verdict as JSON (and under --out)
    python -m bench.gate --update            # re-measure, rewrite the baseline (commit on purpose)
    python -m bench.gate --out results/gate  # keep the run directories (default: a temp folder)
    python -m bench.gate k=1                 # extra overrides after the experiment's own

The experiment (conf/experiment/gate.yaml) lists Hydra overrides; every method in conf/method/
whose default config runs with them (a method needing a drafter that is not configured is
skipped) is measured by the normal runner (`bench.run.runner.execute`), exactly as
`python -m bench method=<m> <overrides>` would, and kept unit by unit (bench/gate/units.py).
Verdict rules: bench/gate/rules.py; their power, simulated from the recorded noise:
bench/gate/power.py (printed by --update, checked by tests/test_gate_power.py).

The baseline file names one commit (`commit`: the clean tree that --update measured) with the
committed per-unit outputs, and one entry per CPU kind measured at that commit (engines.cpu.
cpu_kind: model name, family and model numbers, the flags that matter), each with every method's
per-unit figures. The default gate is A/B (bench/gate/ab.py): that commit and this tree measured
side by side in one job on the machine at hand, whatever its kind. --quick compares this tree
alone with this CPU kind's entry (only where one exists). --update measures `record_repeats`
repeats per unit (their spread is the noise the quick mode's power check draws from), writes the
commit and this kind's entry, and drops the entries of another commit.
Exit status: 0 pass, 1 regression (or a baseline from another model/dtype/device), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.gate import power
from bench.gate.ab import gate_ab
from bench.gate.experiment import (
    ENV_KEYS,
    EXPERIMENT,
    gate_config,
    load_experiment,
    method_names,
)
from bench.gate.rules import Tolerances, compare, env_problems
from bench.gate.table import print_table
from bench.gate.units import stored, units_of
from bench.gate.verdict import headline, write_json
from bench.outputs.records import load
from bench.run.config import check_overrides
from bench.run.runner import execute
from engines.cpu import cpu_kind
from groundfloor.errors import UserError
from groundfloor.progress import progress_bar
from groundfloor.provenance import dirty_files, head_commit

SUMMARY = ("tau", "exact_match", "speedup", "tokens_per_s", "baseline_tokens_per_s", "k")


def overall_row(summary) -> dict:
    """The task='all' row of a summary (or its only task's row), over every category, as plain
    floats."""
    if "category" in summary:
        summary = summary[summary.category == "all"]
    rows = summary[summary.task == "all"] if (summary.task == "all").any() else summary
    if len(rows) != 1:
        raise UserError(f"expected one overall summary row, got {len(rows)}")
    r = rows.iloc[0]
    out = {}
    for m in SUMMARY:
        v = r.get(m)
        out[m] = None if v is None or v != v else float(v)
    return out


def run_method(method: str, overrides: list[str], out: Path, progress=None, shared=None):
    """({"summary": overall row, "units": per unit}, env) of one run, or (None, reason) when the
    method's default config cannot run here (e.g. it needs a drafter that is not configured);
    errors once the run has started measuring propagate."""
    cfg = gate_config(method, overrides, out)
    try:
        summary, _, _ = execute(cfg, out, progress, shared)
    except UserError as e:
        if (out / "records.jsonl").exists():
            raise
        return None, str(e)
    env = json.loads((out / "env.json").read_text())
    got = {"summary": overall_row(summary), "units": units_of(load(out / "records.jsonl"))}
    return got, {k: env.get(k) for k in ENV_KEYS}


def measure(exp: dict, extra: list[str], out: Path) -> tuple[dict, dict, dict]:
    """Run every gated method; returns (rows by method, skipped reasons, env of the last run)."""
    from rich.console import Console

    overrides = [*exp["run_overrides"], *extra]
    check_overrides(overrides)
    now, skipped, env = {}, {}, {}
    shared: dict = {}  # the target engine (and its cost curve) loaded once for every cell
    console = Console(stderr=True)
    with progress_bar(console) as progress:
        for method in method_names(exp):
            own = exp.get("method_overrides", {}).get(method, [])
            row, info = run_method(method, [*overrides, *own], out / method, progress, shared)
            if row is None:
                skipped[method] = info
                console.print(f"[dim]skipped {method}: {info}[/dim]")
            else:
                now[method], env = row, info
    if not now:
        raise UserError("no method ran: " + "; ".join(f"{m}: {w}" for m, w in skipped.items()))
    return now, skipped, env


def write_baseline(
    path: Path,
    exp: dict,
    overrides: list[str],
    now: dict,
    skipped: dict,
    env: dict,
    commit: str | None,
) -> list[str]:
    """Rewrite the baseline: the commit measured (the A side of every A/B gate after it: the
    clean HEAD `record` checked before and after measuring) and this CPU kind's entry; other
    kinds' entries are kept only when they measured the same commit with the same settings
    (each a `--quick` baseline) → notes to print."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    same_settings = (
        doc.get("overrides") == overrides
        and doc.get("method_overrides") == (exp["method_overrides"])
        and doc.get("commit") == commit
    )
    machines = doc.get("machines", {}) if same_settings else {}
    notes = []
    if doc.get("machines") and not same_settings:
        notes.append(
            f"another commit or other settings: dropped the entries of {', '.join(doc['machines'])}"
        )
    machines[env["cpu_kind"]] = {
        "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "env": env,
        "outputs": {u: d["reference"] for u, d in now["ar"]["units"].items()},
        "methods": {
            m: {"summary": n["summary"], "units": stored(n["units"])} for m, n in now.items()
        },
        "skipped": skipped,
    }
    doc = {
        "written_by": "python -m bench.gate --update",
        "experiment": str(exp["path"].name),
        "overrides": overrides,
        "method_overrides": exp["method_overrides"],
        "record_repeats": exp["record_repeats"],
        "commit": commit,
        "machines": machines,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return notes


def power_lines(entry: dict, tol: Tolerances) -> list[str]:
    """The speedup rule's simulated detection and false-alarm rates per method of an entry."""
    ar = entry["methods"]["ar"]["units"]
    out = []
    for m, d in entry["methods"].items():
        k = 0 if m == "ar" else power.methods_of(entry)
        caught = power.rate(d["units"], ar, tol.speedup_tol, tol.speedup_tol, methods=k)
        false = power.rate(d["units"], ar, tol.speedup_tol, 0.0, methods=k)
        out.append(
            f"{m}: a {tol.speedup_tol:.0%} slowdown caught in {caught:.1%} of 1,000 simulated "
            f"runs; false alarms {false:.1%}"
        )
    return out


def gate(
    exp_path: Path,
    extra: list[str],
    update: bool,
    out: Path | None,
    baseline_path: Path | None = None,
    quick: bool = False,
    plant: float = 0.0,
    self_test: bool = False,
    json_path: Path | None = None,
    plant_once: bool = False,
) -> int:
    exp = load_experiment(exp_path)
    bpath = baseline_path or exp["baseline_path"]
    if "ar" not in method_names(exp):
        raise UserError(
            f"{exp_path}: the gate's methods must include ar (its AR-against-AR pairs are the "
            f"noise the speedup rule is set from); got {method_names(exp)}"
        )
    if update:
        return record(exp, extra, out, bpath)
    try:
        base = json.loads(bpath.read_text()) if bpath.exists() else None
    except json.JSONDecodeError as e:
        raise UserError(f"gate baseline {bpath} is not valid JSON ({e}): restore it from git")
    if not base or not base.get("machines"):
        raise UserError(
            f"no gate baseline at {bpath}: record one with `python -m bench.gate --update` and "
            "commit it"
        )
    check_overrides([*exp["run_overrides"], *extra])
    notes = setting_notes(exp, base, extra)
    if quick:
        code = gate_quick(exp, base, extra, out, json_path)
    else:
        where = Path(out) / stamp() if out else None
        code = gate_ab(exp, base, extra, where, plant, self_test, json_path, plant_once)
    for n in notes:
        print(f"note: {n}")
    return code


def stamp() -> str:
    return datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


def setting_notes(exp: dict, base: dict, extra: list[str]) -> list[str]:
    notes = []
    overrides = [*exp.get("overrides", []), *extra]
    if base.get("overrides") != overrides:
        notes.append(f"overrides: baseline {base.get('overrides')}, now {overrides}")
    if base.get("method_overrides", {}) != exp["method_overrides"]:
        notes.append(
            f"method_overrides: baseline {base.get('method_overrides', {})}, "
            f"now {exp['method_overrides']}"
        )
    return notes


def record(exp: dict, extra: list[str], out: Path | None, bpath: Path) -> int:
    """--update: measure this clean tree with `record_repeats` pairs per unit and rewrite the
    baseline: its commit, the committed ids, and this CPU kind's entry. The tree must be clean
    and at the same commit both before and after measuring (an edit or a commit during the run
    would leave a baseline naming code that was not the code measured)."""
    tol = Tolerances.from_dict(exp)
    commit = clean_commit("refusing to record a gate baseline from")
    start = time.perf_counter()
    runs = [*extra, f"repeats={exp['record_repeats']}"]
    with tempfile.TemporaryDirectory(prefix="specsweep-gate-") as tmp:
        now, skipped, env = measure(exp, runs, Path(out) / stamp() if out else Path(tmp))
    took = time.perf_counter() - start
    after = clean_commit(
        "the tree changed while the gate measured, so nothing was written: it is now"
    )
    if after != commit:
        raise UserError(
            f"HEAD moved from {commit} to {after} while the gate measured; nothing written: "
            "rerun `python -m bench.gate --update` with the tree left as it is"
        )
    overrides = [*exp.get("overrides", []), *extra]
    for n in write_baseline(bpath, exp, overrides, now, skipped, env, commit):
        print(f"note: {n}")
    entry = json.loads(bpath.read_text())["machines"][env["cpu_kind"]]
    for line in power_lines(entry, tol):
        print(line)
    print(
        f"gate baseline for {env['cpu_kind']} at {commit} written to {bpath} "
        f"({', '.join(now)}; {took:.0f} s)"
    )
    return 0


def clean_commit(what: str) -> str | None:
    """HEAD's commit when no tracked file differs from it; else one UserError line that names
    the modified files."""
    if dirty := dirty_files():
        raise UserError(
            f"{what} a modified tree ({', '.join(dirty[:4])}{' …' if len(dirty) > 4 else ''}): "
            "commit first, so that the baseline names the commit it measured"
        )
    return head_commit()


def gate_quick(
    exp: dict, base: dict, extra: list[str], out: Path | None, json_path: Path | None = None
) -> int:
    """--quick: this tree alone against this CPU kind's recorded entry (one job, half the time
    of A/B; only where the baseline has an entry for this CPU kind)."""
    tol = Tolerances.from_dict(exp)
    kind = cpu_kind()
    entry = base["machines"].get(kind)
    if entry is None:
        raise UserError(
            f"--quick needs a baseline entry for this CPU kind ({kind}; recorded: "
            f"{', '.join(base['machines'])}): run the A/B gate (make gate), or record one here "
            "with --update"
        )
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specsweep-gate-") as tmp:
        now, skipped, env = measure(exp, extra, Path(out) / stamp() if out else Path(tmp))
    took = time.perf_counter() - start
    blocking, notes = env_problems(entry.get("env", {}), env)
    rows = compare(entry, now, tol, skipped, True)
    code, line = headline(rows, [], "too noisy to judge")
    if blocking:
        code, line = (
            1,
            (
                "FAIL: the baseline was measured on something else ("
                + "; ".join(blocking)
                + "); run `python -m bench.gate --update` there or here on purpose"
            ),
        )
    print(line)
    print_table(
        rows,
        f"gate --quick: {exp['path'].name} vs {exp['baseline_path'].name} ({kind}, recorded "
        f"{entry.get('recorded', '?')} at {entry.get('commit', '?')}) · {took:.0f} s",
    )
    for n in notes:
        print(f"note: {n}")
    for m, why in skipped.items():
        if m not in entry.get("methods", {}):
            print(f"skipped {m}: {why}")
    print(line)
    if json_path:
        doc = {"line": line, "exit": code, "quick": True, "cpu_kind": kind, "notes": notes}
        write_json(json_path, doc, rows)
    return code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gate", description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides (key=value)")
    ap.add_argument("--experiment", type=Path, default=EXPERIMENT)
    ap.add_argument("--baseline", type=Path, help="baseline file (default: the experiment's)")
    ap.add_argument("--update", action="store_true", help="rewrite the baseline from this run")
    ap.add_argument("--out", type=Path, help="keep the run directories (workers' logs) here")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="this tree alone against this CPU kind's recorded entry, not A/B (make gate-quick)",
    )
    ap.add_argument(
        "--plant-slowdown",
        type=float,
        default=0.0,
        metavar="F",
        help="self-test: every turn and batch run of the tree under test F slower inside its "
        "clock (0.15: 15%%; every tokens/s row must fail)",
    )
    ap.add_argument(
        "--plant-once",
        action="store_true",
        help="with --plant-slowdown: only the first B process is slower, as one unlucky process "
        "would be (the confirmation's fresh B is not: the gate must pass, naming the rows)",
    )
    ap.add_argument(
        "--self",
        dest="self_test",
        action="store_true",
        help="A against itself: B is a second checkout of the recorded commit (false alarms)",
    )
    ap.add_argument("--json", type=Path, help="write the verdict as JSON here (also under --out)")
    args = ap.parse_args(argv)
    if args.plant_slowdown < 0:
        print(
            f"error: --plant-slowdown {args.plant_slowdown}: give a fraction ≥ 0 (0.15: 15% "
            "slower)",
            file=sys.stderr,
        )
        return 2
    if args.plant_once and not args.plant_slowdown:
        print("error: --plant-once needs --plant-slowdown F (F > 0)", file=sys.stderr)
        return 2
    if args.quick and (args.plant_slowdown or args.self_test):
        print("error: --plant-slowdown and --self are A/B options; drop --quick", file=sys.stderr)
        return 2
    try:
        return gate(
            args.experiment,
            args.overrides,
            args.update,
            args.out,
            args.baseline,
            args.quick,
            args.plant_slowdown,
            args.self_test,
            args.json,
            args.plant_once,
        )
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
