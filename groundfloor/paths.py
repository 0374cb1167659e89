"""Where things are: the repository root, its `conf/` folder and the local cache, written once.

`SPECSWEEP_CACHE` (default ~/.cache/specsweep) holds converted models, distillation states and
training checkpoints: everything large that can be rebuilt. Everything small and lasting lives
in the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
ARTIFACTS = ROOT / "artifacts"


def cache_root() -> Path:
    return Path(os.environ.get("SPECSWEEP_CACHE", Path.home() / ".cache" / "specsweep"))
