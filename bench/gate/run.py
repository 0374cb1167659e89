"""CI regression gate: run the pinned experiment, compare with the committed baseline, exit 1 on
a drop.

    python -m bench.gate                     # make gate: vs conf/experiment/gate_baseline.json
    python -m bench.gate --update            # re-measure, rewrite the baseline (commit on purpose)
    python -m bench.gate --out results/gate  # keep the run directories (default: a temp folder)
    python -m bench.gate k=1                 # extra overrides after the experiment's own

The experiment (conf/experiment/gate.yaml) lists Hydra overrides; every method in conf/method/
whose default config runs with them (a method needing a drafter that is not configured is
skipped) is measured by the normal runner (`bench.runner.execute`), exactly as
`python -m bench method=<m> <overrides>` would, and kept unit by unit (bench/gate/units.py).
Verdict rules: bench/gate/rules.py; their power, simulated from the recorded noise:
bench/gate/power.py (printed by --update, checked by tests/test_gate_power.py).

The baseline file holds one entry per CPU kind (engines.cpu.cpu_kind: model name, family and
model numbers, the flags that matter), each with the commit it measured (a modified tree is
refused), the committed per-unit outputs and each method's per-unit figures. On a CPU kind
without an entry the deterministic checks run against the first entry and the speedup is
reported, not gated. --update measures `record_repeats` repeats per unit (their spread is the
noise the power check draws from) and rewrites this CPU kind's entry only.
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

import yaml

from bench.config import CONF, check_overrides, compose, group_options
from bench.gate import power
from bench.gate.rules import Row, Tolerances, compare, env_problems
from bench.gate.units import stored, units_of
from bench.records import dirty_files
from bench.table import progress_bar
from groundfloor.errors import UserError

EXPERIMENT = CONF / "experiment" / "gate.yaml"
SUMMARY = ("tau", "exact_match", "speedup", "tokens_per_s", "baseline_tokens_per_s", "k")
ENV_KEYS = (
    "model",
    "device",
    "dtype",
    "cpu",
    "cpu_kind",
    "cpu_count",
    "gpu",
    "torch",
    "transformers",
    "git_sha",
)


def load_experiment(path: Path) -> dict:
    if not path.exists():
        raise UserError(f"gate experiment {str(path)!r} does not exist")
    exp = yaml.safe_load(path.read_text()) or {}
    if not isinstance(exp.get("overrides", []), list):
        raise UserError(f"{path}: 'overrides' must be a list of key=value strings")
    exp["path"] = path
    exp["baseline_path"] = (path.parent / exp.get("baseline", "gate_baseline.json")).resolve()
    exp["overrides"] = [str(o) for o in exp.get("overrides", [])]
    exp["run_overrides"] = [_relative_to(path.parent, o) for o in exp["overrides"]]
    per = exp.get("method_overrides") or {}
    if not isinstance(per, dict) or not all(isinstance(v, list) for v in per.values()):
        raise UserError(f"{path}: 'method_overrides' must map a method to a list of overrides")
    exp["method_overrides"] = {str(m): [str(o) for o in v] for m, v in per.items()}
    exp["record_repeats"] = int(exp.get("record_repeats", 2))
    if exp["record_repeats"] < 2:
        raise UserError(
            f"{path}: record_repeats={exp['record_repeats']}; the baseline needs ≥ 2 repeats per "
            "unit (their spread is the noise the gate's power is simulated from)"
        )
    return exp


def _relative_to(folder: Path, override: str) -> str:
    """`task.path=FILE` in an experiment names a file beside the experiment: absolute for the run
    (the baseline records the overrides as written, so it does not depend on the checkout)."""
    key, _, value = override.partition("=")
    if key == "task.path" and value and not Path(value).is_absolute():
        return f"{key}={(folder / value).resolve()}"
    return override


def method_names(exp: dict) -> list[str]:
    """'all': every conf/method/*.yaml but `skip_methods` (so new methods are gated without
    touching the gate)."""
    names = exp.get("methods", "all")
    if names == "all":
        skip = set(exp.get("skip_methods") or [])
        return [m for m in group_options("method") if m not in skip]
    unknown = set(names) - set(group_options("method"))
    if unknown:
        raise UserError(
            f"gate methods {sorted(unknown)} are unknown; choose from "
            f"{', '.join(group_options('method'))}"
        )
    return list(names)


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
    from bench.records import load
    from bench.runner import execute

    cfg = compose([f"method={method}", *overrides, f"out='{out}'"], "gate overrides")
    if cfg.k == "auto":
        raise UserError("gate overrides: k=auto reads this machine's timings; give an integer")
    if cfg.k is None and cfg.method.get("k") == "auto":  # a fixed size keeps τ deterministic
        cfg.method.k = cfg.method.get("fixed_k")  # none: a tree method's whole tree
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
    path: Path, exp: dict, overrides: list[str], now: dict, skipped: dict, env: dict
) -> list[str]:
    """Rewrite this CPU kind's entry of the baseline file (other kinds' entries are kept while
    the experiment's settings stay the same) → notes to print."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    same_settings = (
        doc.get("overrides") == overrides
        and doc.get("method_overrides") == (exp["method_overrides"])
    )
    machines = doc.get("machines", {}) if same_settings else {}
    notes = []
    if doc.get("machines") and not same_settings:
        notes.append(f"settings changed: dropped the entries of {', '.join(doc['machines'])}")
    machines[env["cpu_kind"]] = {
        "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": env.get("git_sha"),
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


def _fmt(row: Row, v) -> str:
    if v is None:
        return "–"
    return f"{v:.2f}" if row.metric in ("exact_match", "tokens") else f"{v:.3f}"


def print_table(rows: list[Row], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("method", "metric", "baseline", "now", "change", "rule", "verdict"):
        t.add_column(col, justify="right" if col in ("baseline", "now", "change") else "left")
    for r in rows:
        ch = r.change
        change = (
            "–"
            if ch is None
            else (f"{ch:+.2f}" if r.metric in ("exact_match", "tokens") else f"{ch:+.1%}")
        )
        style = "bold red" if r.failed else "green" if r.verdict in ("ok", "better") else "yellow"
        t.add_row(
            r.method,
            r.metric,
            _fmt(r, r.baseline),
            _fmt(r, r.now),
            change,
            r.rule,
            f"[{style}]{r.verdict}[/{style}]",
        )
    Console(width=None if sys.stdout.isatty() else 160).print(t)


def gate(
    exp_path: Path,
    extra: list[str],
    update: bool,
    out: Path | None,
    baseline_path: Path | None = None,
) -> int:
    exp = load_experiment(exp_path)
    bpath = baseline_path or exp["baseline_path"]
    tol = Tolerances.from_dict(exp)
    if "ar" not in method_names(exp):
        raise UserError(
            f"{exp_path}: the gate's methods must include ar (its AR-against-AR pairs are the "
            f"noise the speedup rule is set from); got {method_names(exp)}"
        )
    if update and (dirty := dirty_files()):
        raise UserError(
            f"refusing to record a gate baseline from a modified tree ({', '.join(dirty[:4])}"
            f"{' …' if len(dirty) > 4 else ''}): commit first, so that the baseline names the "
            "commit it measured"
        )
    if not update:
        base = json.loads(bpath.read_text()) if bpath.exists() else None
        if not base or not base.get("machines"):
            raise UserError(
                f"no gate baseline at {bpath}: record one with `python -m bench.gate "
                "--update` and commit it"
            )
    start = time.perf_counter()
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    runs = [*extra, f"repeats={exp['record_repeats']}"] if update else extra
    with tempfile.TemporaryDirectory(prefix="specsweep-gate-") as tmp:
        now, skipped, env = measure(exp, runs, Path(out) / stamp if out else Path(tmp))
    took = time.perf_counter() - start
    overrides = [*exp.get("overrides", []), *extra]
    if update:
        for n in write_baseline(bpath, exp, overrides, now, skipped, env):
            print(f"note: {n}")
        entry = json.loads(bpath.read_text())["machines"][env["cpu_kind"]]
        for line in power_lines(entry, tol):
            print(line)
        print(
            f"gate baseline for {env['cpu_kind']} written to {bpath} ({', '.join(now)}; "
            f"{took:.0f} s)"
        )
        return 0
    kind = env.get("cpu_kind")
    entry = base["machines"].get(kind)
    same_kind = entry is not None
    notes = []
    if not same_kind:
        first = next(iter(base["machines"]))
        entry = base["machines"][first]
        notes.append(
            f"no baseline for this CPU kind ({kind}; recorded: {', '.join(base['machines'])}): "
            f"tokens and τ checked against {first!r}'s, the speedup reported, not gated"
        )
    blocking, more = env_problems(entry.get("env", {}), env)
    notes += more
    if base.get("overrides") != overrides:
        notes.append(f"overrides: baseline {base.get('overrides')}, now {overrides}")
    if base.get("method_overrides", {}) != exp["method_overrides"]:
        notes.append(
            f"method_overrides: baseline {base.get('method_overrides', {})}, "
            f"now {exp['method_overrides']}"
        )
    rows = compare(entry, now, tol, skipped, same_kind)
    print_table(
        rows,
        f"gate: {exp_path.name} vs {bpath.name} ({kind if same_kind else 'another CPU kind'}, "
        f"recorded {entry.get('recorded', '?')} at {entry.get('commit', '?')}) · {took:.0f} s",
    )
    for n in notes:
        print(f"note: {n}")
    for m, why in skipped.items():
        if m not in entry.get("methods", {}):
            print(f"skipped {m}: {why}")
    failed = sorted({r.method for r in rows if r.failed})
    if blocking:
        print(
            "FAIL: the baseline was measured on something else ("
            + "; ".join(blocking)
            + "); run `python -m bench.gate --update` there or here on purpose"
        )
        return 1
    if failed:
        print(f"FAIL: regression in {', '.join(failed)}")
        return 1
    weak = sorted({r.method for r in rows if r.verdict == "underpowered"})
    print(
        "PASS" + (f" (speedup underpowered, too noisy to judge: {', '.join(weak)})" if weak else "")
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gate", description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides (key=value)")
    ap.add_argument("--experiment", type=Path, default=EXPERIMENT)
    ap.add_argument("--baseline", type=Path, help="baseline file (default: the experiment's)")
    ap.add_argument("--update", action="store_true", help="rewrite the baseline from this run")
    ap.add_argument("--out", type=Path, help="keep the run directories here")
    args = ap.parse_args(argv)
    try:
        return gate(args.experiment, args.overrides, args.update, args.out, args.baseline)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
