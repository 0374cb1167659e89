"""The gate's pinned experiment: its file, the methods it gates and one method's run config.

Read by the gate (bench/gate/run.py) and by each tree's worker (bench/gate/worker.py), so that a
tree's worker runs the experiment as that tree defines it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from bench.run.config import CONF, compose, group_options
from groundfloor.errors import UserError

EXPERIMENT = CONF / "experiment" / "gate.yaml"
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


def gate_config(method: str, overrides: list[str], out: Path, pin: bool = True):
    """The run config of one gated method: `python -m bench method=M OVERRIDES`; pinned, its
    draft size fixed (a method whose k is auto runs at its fixed_k) so that τ is deterministic;
    unpinned, as users run it (the A/B gate's speed and batch cells, bench/gate/cells.py)."""
    cfg = compose([f"method={method}", *overrides, f"out='{out}'"], "gate overrides")
    if not pin:
        return cfg
    if cfg.k == "auto":
        raise UserError("gate overrides: k=auto reads this machine's timings; give an integer")
    if auto_k(cfg):
        cfg.method.k = cfg.method.get("fixed_k")  # none: a tree method's whole tree
    return cfg


def auto_k(cfg) -> bool:
    """Whether the config's method runs k=auto (its default, no top-level k given)."""
    return cfg.k is None and cfg.method.get("k") == "auto"
