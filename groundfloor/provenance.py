"""Which code produced a measurement: HEAD's commit and the tracked files that differ from it,
or, outside git (a copied tree), a hash of the code's files. A run keeps it beside its results
(env.json's git_sha, each cell's cell.json) so that a resumed cell is refused when the code
differs, and the gate refuses to record a baseline from a modified tree.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from groundfloor.paths import ROOT


def git_sha() -> str | None:
    """HEAD's commit, with '-dirty' when tracked files differ from it (None outside git)."""
    code = code_state()
    if not code["commit"]:
        return None
    return code["commit"] + ("-dirty" if code["modified"] else "")


@functools.cache
def code_state() -> dict:
    """The code this process measures with, read once (the modules are imported by then):
    {"commit": HEAD, "modified": tracked files that differ from it, "diff": a hash of those
    differences (None when clean)}; outside git (a copied tree) {"commit": None, "sources": a
    hash of the code's files}. cell.json keeps it, so that a resumed cell (bench.run.cells) is
    refused when the code differs."""
    commit = (_git("rev-parse", "HEAD") or "").strip()
    if not commit:
        return {"commit": None, "modified": [], "diff": None, "sources": sources_hash()}
    modified = dirty_files()
    diff = _git("diff", "HEAD", "--binary") if modified else None
    digest = hashlib.sha256(diff.encode()).hexdigest()[:16] if diff is not None else None
    return {"commit": commit, "modified": modified, "diff": digest}


SOURCES = ("groundfloor", "engines", "tasks", "drafters", "methods", "bench", "conf")
SOURCE_SUFFIXES = (".py", ".yaml", ".cpp", ".h", ".json", ".jsonl")


def sources_hash(root: Path = ROOT) -> str:
    """A hash of the code's files, paths and contents: what tells two copies of the tree apart
    where there is no git to ask."""
    files = sorted(
        p
        for folder in SOURCES
        for p in (root / folder).rglob("*")
        if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts
    )
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def head_commit(root: Path = ROOT) -> str | None:
    """HEAD's commit as git reads it now (not the cached `code_state`), None outside git."""
    return (_git("rev-parse", "HEAD", root=root) or "").strip() or None


def dirty_files(root: Path = ROOT) -> list[str]:
    """Tracked files that differ from HEAD (what makes a measurement not reproducible from the
    commit it names)."""
    out = _git("status", "--porcelain", "--untracked-files=no", root=root) or ""
    return [line[3:] for line in out.splitlines() if line.strip()]


def _git(*args: str, root: Path = ROOT) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None
