"""One tree's side of the A/B gate: a long-lived process that runs the pinned experiment's cells
(bench/gate/cells.py) one conversation, or one batch run, at a time, on request.

    python -m bench.gate.worker --experiment FILE [--kinds speed,fixed,batch,dist]
                                [--plant-slowdown F] [overrides]

Started by bench/gate/ab.py with the tree as its working directory, so that `bench`, `engines`,
`methods`, the native kernels' sources and conf/ are that tree's: the recorded commit's in a git
worktree, or the tree under test. The experiment FILE is the recorded commit's (its settings,
tolerances and prompts judge both trees). The engine is loaded once, every cell of the kinds
asked for is built on it and warmed up (untimed, as a run does: bench.run.runner.Runner.prepare),
then the worker answers one JSON line per request on stdout:

    ready    {"protocol": 2, "env": {...}, "cells": [{"name", "kind", "method"}, ...],
              "skipped": {cell: why}, "prompts": [[prompt id, turns], ...],
              "groups": [[prompt id, ...], ...], "root": this tree}
    request  {"cell": c, "prompt": id}   → {"turns": [{"wall_ns", "new_tokens", "forwards",
                                                       "ids", "disturbed"}, ...]}
    request  {"cell": c, "group": g}     → {"batch": {"wall_ns", "new_tokens", "forwards",
                                                      "ids": [[...] per sequence], "disturbed"}}
    request  {"cell": c, "dist": true}   → {"dist": {"pvalue", "status", "drafted", "floor"}}
    request  {"quit": true}              → the process exits

A batch cell's group g is B first turns (groups: the prompts from g·B on, wrapping around),
decoded together in one batch run. Everything else the run prints goes to stderr, so stdout
carries the protocol alone. A change of the protocol bumps PROTOCOL; the gate refuses a recorded
commit whose worker speaks another one (re-record the baseline). --plant-slowdown makes every
turn and batch run F slower inside its clock (bench/gate/plant.py): the gate's self-test, never
a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from bench.gate.cells import cells, rows_of
from bench.run.interference import interfered
from groundfloor.errors import UserError
from tasks.prompt import Prompt

PROTOCOL = 2


def build(exp_path: Path, extra: list[str], out: Path, kinds: set[str], plant: float):
    """({cell name: (Cell, prepared Runner, Batched or None)}, {cell name: why skipped})."""
    from bench.gate.experiment import (  # cost: hydra (~150 ms); ab.py imports this for PROTOCOL
        auto_k,
        gate_config,
        load_experiment,
        method_names,
    )
    from bench.gate.plant import plant_batch, plant_turns  # cost: torch; ab.py reads PROTOCOL
    from bench.run.batched import Batched  # cost: torch (~1.4 s); ab.py reads PROTOCOL
    from bench.run.config import validate  # cost: hydra (~130 ms); ab.py reads PROTOCOL
    from bench.run.runner import Runner  # cost: torch, scipy (~2.1 s); ab.py reads PROTOCOL

    exp = load_experiment(exp_path)
    overrides = [*exp["run_overrides"], *extra]

    def differs(m: str) -> bool:
        try:
            return auto_k(gate_config(m, overrides, out / "probe", pin=False))
        except UserError:
            return False  # the cell's own build names the error

    shared: dict = {}
    built, skipped = {}, {}
    for cell in cells(exp, method_names(exp), differs):
        if cell.kind not in kinds:
            continue
        try:
            cfg = gate_config(cell.method, [*overrides, *cell.overrides], out / cell.name, cell.pin)
            validate(cfg)
            runner = Runner(cfg, out / cell.name, shared)
        except UserError as e:
            skipped[cell.name] = str(e)
            continue
        runner.prepare()
        batched = None
        if cell.kind == "batch":
            batched = Batched(runner)
            batched.warm(runner.prompts)
            if plant:
                plant_batch(batched.sides["method"], plant)
        if plant:
            plant_turns(runner, plant)
        built[cell.name] = (cell, runner, batched)
    if not built:
        raise UserError("no cell ran: " + "; ".join(f"{c}: {w}" for c, w in skipped.items()))
    return built, skipped


def groups(runner, size: int, runs: int) -> list[list]:
    """The batch cell's `runs` groups of `size` prompts, first turns only."""
    ps = runner.prompts
    return [
        [
            Prompt(p.id, p.task, p.category, p.turns[:1], max_new_tokens=p.max_new_tokens)
            for p in (ps[(g * size + j) % len(ps)] for j in range(size))
        ]
        for g in range(runs)
    ]


def conversation(runner, prompt_id: str) -> list[dict]:
    """Every turn of one prompt with the runner's method, as the protocol returns them
    ("disturbed": other work took the machine during the turn, bench.run.interference)."""
    prompt = next(p for p in runner.prompts if p.id == prompt_id)
    turns = runner.conversation(runner.method, prompt, runner.max_new(prompt))
    return [
        {
            "wall_ns": int(res.times_ns.get("wall", 0)),
            "new_tokens": len(res.output_ids),
            "forwards": int(res.target_forwards),
            "ids": [int(t) for t in res.output_ids],
            "disturbed": interfered(load, runner.rules),
        }
        for _, res, _, load in turns
    ]


def batch_run(runner, batched, group: list) -> dict:
    """One batch run of the method side over a group, each prompt at its own budget (its wall:
    the time some sequence was inside its turn's clock, bench.decode.batch)."""
    run, load = batched.side("method", group, [runner.max_new(p) for p in group])
    return {
        "wall_ns": int(run.wall_s * 1e9),
        "new_tokens": run.new_tokens,
        "forwards": int(run.forwards),
        "ids": [[int(t) for t in run.turns[(i, 0)].output_ids] for i in range(len(group))],
        "disturbed": interfered(load, runner.rules),
    }


def distribution(runner) -> dict:
    """A dist cell's check=distribution (seeded, untimed) → its result's figures."""
    got = runner.check_distribution()
    return {"pvalue": got.pvalue, "status": got.status, "drafted": got.drafted, "floor": got.floor}


def serve(built: dict, skipped: dict, exp_path: Path, proto, requests) -> None:
    from bench.gate.experiment import ENV_KEYS, load_experiment  # cost: hydra; ab.py reads PROTOCOL
    from bench.outputs.records import env_info  # cost: torch (~1.2 s); ab.py reads PROTOCOL

    _, first, _ = next(iter(built.values()))
    env = env_info(
        first.device, str(first.cfg.model.target), first.choice, first.target, first.method, {}
    )
    b = rows_of(load_experiment(exp_path))["batch"]
    grouped = {
        name: groups(r, b["batch"], b["runs"])
        for name, (c, r, _) in built.items()
        if c.kind == "batch"
    }
    any_groups = next(iter(grouped.values()), [])
    ready = {
        "protocol": PROTOCOL,
        "env": {k: env.get(k) for k in ENV_KEYS},
        "cells": [{"name": n, "kind": c.kind, "method": c.method} for n, (c, *_) in built.items()],
        "skipped": skipped,
        "prompts": [[p.id, len(p.turns)] for p in first.prompts],
        "groups": [[p.id for p in g] for g in any_groups],
        "root": str(Path(__file__).resolve().parents[2]),
    }
    _send(proto, ready)
    for line in requests:
        req = json.loads(line)
        if req.get("quit"):
            return
        _, runner, batched = built[req["cell"]]
        if req.get("dist"):
            _send(proto, {"dist": distribution(runner)})
        elif "group" in req:
            got = batch_run(runner, batched, grouped[req["cell"]][req["group"]])
            _send(proto, {"batch": got})
        else:
            _send(proto, {"turns": conversation(runner, req["prompt"])})


def _send(proto, obj: dict) -> None:
    proto.write(json.dumps(obj) + "\n")
    proto.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gate.worker", description=__doc__)
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--experiment", type=Path, required=True)
    ap.add_argument("--kinds", default="speed,fixed,batch,dist")
    ap.add_argument("--plant-slowdown", type=float, default=0.0)
    args = ap.parse_args(argv)
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the run's own output (Python's and a native build's) goes to stderr
    kinds = set(args.kinds.split(","))
    with tempfile.TemporaryDirectory(prefix="specsweep-gate-worker-") as tmp:
        built, skipped = build(
            args.experiment, args.overrides, Path(tmp), kinds, args.plant_slowdown
        )
        serve(built, skipped, args.experiment, proto, sys.stdin)
    return 0


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning)
    sys.exit(main())
