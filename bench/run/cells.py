"""A run directory as one cell of a sweep: its identity, its state, and resuming it.

    cell.json   {"hash": ..., "status": "running" | "partial" | "complete", "prompts": [done, n],
                 "code": {"commit": ..., "modified": [...], "diff": ...}}

The hash covers the composed config (every group and key, resolved) except `out` and the
launcher, so the same cell run again, on any machine, has the same hash; `code` is the code that
measured it (groundfloor.provenance.code_state). With `resume=true` (the default) a directory whose
cell.json says complete with the same hash is skipped; one that holds records of the same cell
continues after its last finished prompt (records.jsonl is appended one prompt at a time,
atomically). A directory holding another cell, or measured by other code (another commit, or
the tree modified otherwise), is refused, naming what differs (bench.run.lifecycle.open_cell).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omegaconf import OmegaConf

from bench.outputs import records
from groundfloor import provenance

IGNORED = ("out",)
SHOWN = 4  # differing files or settings named in a refusal; the rest are counted


def cell_hash(cfg) -> str:
    data = OmegaConf.to_container(cfg, resolve=True)
    for key in IGNORED:
        data.pop(key, None)
    if data.get("engine") == "openai":  # the old spelling of backend=server: the same cell
        data.update(engine="auto", backend="server")
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read(out: Path) -> dict | None:
    try:
        return json.loads((out / "cell.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def write(out: Path, h: str, status: str, done: int, total: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    state = {"hash": h, "status": status, "prompts": [done, total], "code": provenance.code_state()}
    tmp = out / "cell.json.tmp"
    tmp.write_text(json.dumps(state))
    tmp.rename(out / "cell.json")


def finished(out: Path) -> set[tuple[str, str]]:
    """(task, prompt id) of every prompt whose records are in records.jsonl."""
    return {(r["task"], r["prompt_id"]) for r in records.read_rows(out / "records.jsonl")}


def recorded_code(out: Path, state: dict) -> dict | None:
    """The code that measured the cell: cell.json's record; for a cell written before it kept
    one, env.json's git sha (modified files not named); None when there is neither (a cell
    stopped before it measured anything)."""
    if "code" in state:
        return state["code"]
    try:
        sha = json.loads((out / "env.json").read_text()).get("git_sha")
    except (OSError, json.JSONDecodeError):
        return None
    dirty = bool(sha) and sha.endswith("-dirty")
    return {
        "commit": sha.removesuffix("-dirty") if sha else None,
        "modified": ["files not recorded"] if dirty else [],
        "diff": "not recorded" if dirty else None,
    }


def code_change(then: dict, now: dict) -> str | None:
    """None when `then` (a cell's record) is the code `now` runs, else what differs:
    'commit X (clean), this tree is Y (modified: a.py)'."""
    key = lambda c: (c.get("commit"), c.get("diff"), c.get("sources"))  # noqa: E731
    if key(then) == key(now):
        return None
    later = describe(now)
    same_files = (then.get("commit"), then.get("modified")) == (now["commit"], now["modified"])
    if now["commit"] and same_files:
        later += ", changed again since"
    return f"{'commit ' if then.get('commit') else ''}{describe(then)}, this tree is {later}"


def describe(code: dict) -> str:
    """'abcdef123456 (clean)', 'abcdef123456 (modified: a.py, b.py)', or outside git
    'a copy outside git (sources 0123456789abcdef)'."""
    if not code.get("commit"):
        return f"a copy outside git (sources {code.get('sources') or 'not recorded'})"
    modified = code.get("modified") or []
    return f"{code['commit'][:12]} ({'modified: ' + shown(modified) if modified else 'clean'})"


def config_changes(out: Path, cfg) -> list[str]:
    """'key was → now' for each setting where the config.yaml in `out` differs from `cfg`
    (`out` and what auto resolved to left out); [] when there is none to read."""
    try:
        then = OmegaConf.to_container(OmegaConf.load(out / "config.yaml"), resolve=False)
    except (OSError, ValueError):
        return []
    now = OmegaConf.to_container(cfg, resolve=False)
    for data in (then, now):
        for key in (*IGNORED, "resolved"):
            data.pop(key, None)
    a, b = dict(flat(then)), dict(flat(now))
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return [f"{k} {a.get(k)} → {b.get(k)}" for k in keys]


def flat(data: dict, prefix: str = ""):
    """(dotted key, value) of every leaf of a nested dict."""
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def shown(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more
