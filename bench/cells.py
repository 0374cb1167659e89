"""A run directory as one cell of a sweep: its identity, its state, and resuming it.

    cell.json   {"hash": ..., "status": "running" | "partial" | "complete", "prompts": [done, n]}

The hash covers the composed config (every group and key, resolved) except `out` and the
launcher, so the same cell run again, on any machine, has the same hash. With `resume=true` (the
default) a directory whose cell.json says complete with the same hash is skipped; one that holds
records of the same cell continues after its last finished prompt (records.jsonl is appended one
prompt at a time, atomically); a directory holding another cell is refused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omegaconf import OmegaConf

IGNORED = ("out",)


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
    tmp = out / "cell.json.tmp"
    tmp.write_text(json.dumps({"hash": h, "status": status, "prompts": [done, total]}))
    tmp.rename(out / "cell.json")


def finished(out: Path) -> set[tuple[str, str]]:
    """(task, prompt id) of every prompt whose records are in records.jsonl."""
    from bench.records import read_rows

    return {(r["task"], r["prompt_id"]) for r in read_rows(out / "records.jsonl")}
