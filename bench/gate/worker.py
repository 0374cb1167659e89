"""One tree's side of the A/B gate: a long-lived process that runs the tree's own pinned
experiment one conversation at a time, on request.

    python -m bench.gate.worker --experiment conf/experiment/gate.yaml [--delay-ms D] [overrides]

Started by bench/gate/ab.py with the tree as its working directory, so that `bench`, `engines`,
`methods`, the native kernels' sources and conf/ are that tree's: the recorded commit's in a git
worktree, or the tree under test. The engine is loaded once, every gated method is built on it
and warmed up (untimed, as a run does: bench.run.runner.Runner.prepare), then the worker answers one
JSON line per request on stdout:

    ready    {"protocol": 1, "env": {...}, "methods": [...], "skipped": {m: why},
              "prompts": [[prompt id, turns], ...], "root": this tree}
    request  {"method": m, "prompt": id}    → {"turns": [{"wall_ns", "new_tokens", "forwards",
                                                          "ids", "disturbed"}, ...]}
    request  {"quit": true}                 → the process exits

Everything else the run prints goes to stderr, so stdout carries the protocol alone. A change of
the protocol bumps PROTOCOL; the gate refuses a recorded commit whose worker speaks another one
(re-record the baseline). --delay-ms plants a sleep in every target forward: the self-test of
the gate (a slower tree must fail it), never a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

PROTOCOL = 1


def planted_delay(target, ms: float) -> None:
    """Every forward of `target` sleeps `ms` first (the gate's self-test of a slower tree)."""
    forward = target.forward

    def slower(*args, **kwargs):
        time.sleep(ms / 1000)
        return forward(*args, **kwargs)

    target.forward = slower


def build(exp_path: Path, extra: list[str], out: Path, delay_ms: float):
    """({method: prepared Runner}, {method: why skipped}) for the experiment's gated methods, on
    one engine."""
    from bench.gate.experiment import gate_config, load_experiment, method_names
    from bench.run.config import validate
    from bench.run.runner import Runner
    from groundfloor.errors import UserError

    exp = load_experiment(exp_path)
    overrides = [*exp["run_overrides"], *extra]
    shared: dict = {}
    runners, skipped, delayed = {}, {}, set()
    for method in method_names(exp):
        own = exp["method_overrides"].get(method, [])
        cfg = gate_config(method, [*overrides, *own], out / method)
        try:
            validate(cfg)
            runner = Runner(cfg, out / method, shared)
        except UserError as e:
            skipped[method] = str(e)
            continue
        if delay_ms and id(runner.target) not in delayed:
            planted_delay(runner.target, delay_ms)
            delayed.add(id(runner.target))
        runner.prepare()
        runners[method] = runner
    if not runners:
        raise UserError("no method ran: " + "; ".join(f"{m}: {w}" for m, w in skipped.items()))
    return runners, skipped


def conversation(runner, prompt_id: str) -> list[dict]:
    """Every turn of one prompt with the runner's method, as the protocol returns them
    ("disturbed": other work took the machine during the turn, bench.run.interference)."""
    from bench.run.interference import interfered

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


def serve(runners: dict, skipped: dict, proto, requests) -> None:
    from bench.gate.experiment import ENV_KEYS
    from bench.outputs.records import env_info

    first = next(iter(runners.values()))
    env = env_info(
        first.device, str(first.cfg.model.target), first.choice, first.target, first.method, {}
    )
    ready = {
        "protocol": PROTOCOL,
        "env": {k: env.get(k) for k in ENV_KEYS},
        "methods": list(runners),
        "skipped": skipped,
        "prompts": [[p.id, len(p.turns)] for p in first.prompts],
        "root": str(Path(__file__).resolve().parents[2]),
    }
    _send(proto, ready)
    for line in requests:
        req = json.loads(line)
        if req.get("quit"):
            return
        _send(proto, {"turns": conversation(runners[req["method"]], req["prompt"])})


def _send(proto, obj: dict) -> None:
    proto.write(json.dumps(obj) + "\n")
    proto.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gate.worker", description=__doc__)
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--experiment", type=Path, required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    args = ap.parse_args(argv)
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the run's own output (Python's and a native build's) goes to stderr
    with tempfile.TemporaryDirectory(prefix="specsweep-gate-worker-") as tmp:
        runners, skipped = build(args.experiment, args.overrides, Path(tmp), args.delay_ms)
        serve(runners, skipped, proto, sys.stdin)
    return 0


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning)
    sys.exit(main())
