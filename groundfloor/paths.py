"""Where things are: the repository root, its `conf/` folder and the local cache, written once.

`SPECSWEEP_CACHE` (default ~/.cache/specsweep) holds converted models, distillation states and
training checkpoints: everything large that can be rebuilt. Everything small and lasting lives
in the repository.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from groundfloor.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
ARTIFACTS = ROOT / "artifacts"


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def check_group_values(group: str, value: str) -> None:
    """`value` (one option or a comma-separated sweep) must name files in conf/<group>/."""
    options = group_options(group)
    for v in value.split(","):
        if v and v not in options:
            raise UserError(f"{group}={v!r} is unknown; choose one of: {', '.join(options)}")


def cache_root() -> Path:
    return Path(os.environ.get("SPECSWEEP_CACHE", Path.home() / ".cache" / "specsweep"))


def writable_dir(folder, setting: str = "out") -> Path:
    """`folder`, created with its parents, once a file could be written in it: a run that
    cannot keep its results stops in one line (UserError naming `setting`) before it loads or
    measures anything."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as e:
        why = e.strerror or str(e)
        raise UserError(f"{setting}={str(folder)!r} cannot be created or written: {why}")
    return folder
