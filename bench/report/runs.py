"""Loading finished runs for the report: every run directory under the given paths, as tables.

A run directory is one holding summary.csv (a single `python -m bench` run, or one job of a
Hydra sweep under results/<time>_sweep/<n>_<method>/). `load_runs` returns two DataFrames:

    cells    one row per summary.csv row (task × method config, task='all' overall rows
             included), plus the run's identity: model, device, device_name, dtype, group,
             source, run, settings (prompt_set and repeats), prompt_set (the prompts and
             budgets); and τ's 95% interval (bootstrap over prompt × turn units)
    records  records.jsonl of every run (output ids dropped) with the same identity columns

`group` names the (model, device, engine · weights · dtype[, source]) a number was measured on:
the report never puts numbers from two groups into one table or bar without saying so. When
several runs measured the same cell (group, method, k, temperature, batch, task), the newest run
wins.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import yaml

from groundfloor.paths import CONF

CONF_METHOD = CONF / "method"
CELL = ["group", "method", "draft_format", "k", "temperature", "batch", "task"]
# records.jsonl's columns the report leaves out: each turn's token ids (every other column, a
# new measurement included, is read as the run wrote it)
LEFT_OUT = ["output_ids"]
# summary.csv columns an older run may lack (intervals registered since): read as missing
LATER_COLUMNS = ["tau_ci_low", "tau_ci_high", "tau_round_ci_low", "tau_round_ci_high"]


def k_agnostic_methods() -> set[str]:
    """Methods that draft nothing (their YAML sets k: 0, like ar): k is not part of their label.
    (k: null is different: a tree method's own depth.)"""
    out = set()
    for p in CONF_METHOD.glob("*.yaml"):
        cfg = yaml.safe_load(p.read_text()) or {}
        if cfg.get("k") == 0:
            out.add(str(cfg.get("name", p.stem)))
    return out


def find_runs(paths: list[Path]) -> list[Path]:
    """Run directories (holding summary.csv) at or below each path, oldest first."""
    found = set()
    for p in paths:
        p = Path(p)
        if (p / "summary.csv").exists():
            found.add(p.resolve())
        elif p.is_dir():
            found |= {s.parent.resolve() for s in p.rglob("summary.csv")}
    return sorted(found, key=lambda d: ((d / "summary.csv").stat().st_mtime, str(d)))


def device_name(env: dict) -> str:
    """'cpu (AMD EPYC, 2 cores)' or 'cuda (NVIDIA H100 80GB HBM3)'."""
    dev = env.get("device") or "unknown"
    if dev == "cuda" and env.get("gpu"):
        return f"cuda ({env['gpu']})"
    if dev == "cpu" and env.get("cpu"):
        cores = f", {env['cpu_count']} cores" if env.get("cpu_count") else ""
        return f"cpu ({env['cpu']}{cores})"
    return dev


def model_name(target: str) -> str:
    """A short model name: a local directory's basename, a hub id or embedded name as is."""
    target = str(target)
    if target.startswith("embedded:"):
        return target.split(":", 1)[1]
    p = Path(target)
    return p.name if p.is_absolute() or target.startswith(".") else target


def precision_label(env: dict, summary: pd.DataFrame) -> str:
    """What ran the numbers: 'lean engine · int4 weights · float32' (older runs: the dtype).
    Weight-only quantization changes the target, so it is part of every group's name."""
    dtype = env.get("dtype") or (str(summary.dtype.iloc[0]) if len(summary) else "unknown")
    choice = env.get("engine_choice") or {}
    if not choice:
        return dtype
    return f"{choice.get('engine')} engine · {choice.get('weights')} weights · {dtype}"


def group_label(model: str, device: str, dtype: str, source: str = "specsweep") -> str:
    label = f"{model} · {device} · {dtype}"
    return label if source == "specsweep" else f"{label} · {source} import"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def _prompt_set(cfg: dict) -> str:
    """The prompts and budgets a run decoded, e.g. 'core, 1 prompt/task, 24 new tokens'."""
    task = (cfg.get("task") or {}).get("name", "?")
    limit = cfg.get("limit")
    per = f"{limit} prompt{'s' if limit != 1 else ''}/task" if limit else "all prompts"
    new = cfg.get("max_new_tokens")
    length = f"{new} new tokens" if new else "task-default lengths"
    return f"{task}, {per}, {length}"


def _settings(cfg: dict) -> str:
    """The prompt set and length a run used, e.g. 'core, 1 prompt/task, 24 new tokens, 1 repeat'."""
    reps = cfg.get("repeats")
    return f"{_prompt_set(cfg)}, {reps} repeat{'s' if reps != 1 else ''}"


def _read_yaml(path: Path) -> dict:
    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def load_run(run: Path, agnostic: set[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, records) of one run directory."""
    summary = pd.read_csv(run / "summary.csv")
    env = json.loads((run / "env.json").read_text()) if (run / "env.json").exists() else {}
    cfg = _read_yaml(run / "config.yaml")
    model = model_name(env.get("model") or (cfg.get("model") or {}).get("target", "unknown"))
    dev = device_name(env) if env else str(summary.device.iloc[0]) if len(summary) else "unknown"
    dtype = precision_label(env, summary)
    ident = {
        "source": "specsweep",
        "model": model,
        "device_name": dev,
        "dtype": dtype,
        "host": env.get("host") or "unknown",
        "run": str(run),
        "settings": _settings(cfg),
        "prompt_set": _prompt_set(cfg),
        "group": group_label(model, dev, dtype),
    }
    path = run / "records.jsonl"
    records = pd.read_json(path, lines=True) if path.exists() and path.stat().st_size else None
    if records is not None:
        records = records.drop(columns=[c for c in LEFT_OUT if c in records.columns])
        for key, val in ident.items():
            records[key] = val
        records["device"] = env.get("device", "unknown")
    cells = summary.copy()
    for key, val in ident.items():
        cells[key] = val
    cells["device"] = env.get("device") or cells.get("device", "unknown")
    for c in LATER_COLUMNS:
        if c not in cells:
            cells[c] = math.nan
    if "target_format" not in cells:  # a run from before the formats had columns of their own
        cells["target_format"] = cells["weights"] if "weights" in cells else dtype
    if "draft_format" not in cells:
        cells["draft_format"] = "none"
    cells["method"] = own_label(cells)
    if records is not None and "draft_format" in records:
        records["method"] = own_label(records)
    if "batch" not in cells:  # a run from before batch=B (or a server cell): one at a time
        cells["batch"] = 1
    cells["batch"] = cells["batch"].fillna(1).astype(int)
    if "tau_round" in cells:  # a method that drafts nothing emits one token per step
        cells["tau_round"] = cells.tau_round.where(cells.tau_round.notna(), 1.0)
    if records is None:
        records = pd.DataFrame(columns=list(ident) + ["device"])
    return normalize(cells, agnostic), normalize(records, agnostic)


def own_label(df: pd.DataFrame) -> pd.Series:
    """A self-draft (drafters/selfdraft.py) is a method config of its own beside the shipped
    draft model: "draft self:int4"."""
    own = df.draft_format.astype(str).str.startswith("self:")
    return df.method.where(~own, df.method + " " + df.draft_format.astype(str))


def normalize(df: pd.DataFrame, agnostic: set[str]) -> pd.DataFrame:
    """k is meaningless for methods that draft nothing (a sweep over k still runs ar): set 0.
    k=auto becomes k NaN with k_auto True."""
    if len(df) and "k" in df:
        df = df.copy()
        df["k_auto"] = df["k"].astype(str) == "auto"  # k=auto: chosen per round (its mean_k)
        df["k"] = pd.to_numeric(df["k"], errors="coerce")
        df.loc[df.method.isin(agnostic), "k"] = 0
    return df


def newest_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (group, method, k, temperature, task): the newest run's (cells come oldest
    first)."""
    if cells.empty:
        return cells
    return cells.drop_duplicates(subset=CELL, keep="last").reset_index(drop=True)


def load_runs(paths: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame, list[Path]]:
    """(cells, records, run dirs) of every run under `paths`; cells deduplicated to the newest."""
    runs = find_runs(paths)
    agnostic = k_agnostic_methods()
    cells, records = [], []
    for run in runs:
        c, r = load_run(run, agnostic)
        cells.append(c)
        if len(r):
            records.append(r)
    cells_df = newest_cells(pd.concat(cells, ignore_index=True)) if cells else pd.DataFrame()
    records_df = pd.concat(records, ignore_index=True) if records else pd.DataFrame()
    if len(records_df) and len(cells_df):  # keep only the records behind the cells shown
        records_df = records_df[records_df.run.isin(set(cells_df.run))]
    return cells_df, records_df, runs
