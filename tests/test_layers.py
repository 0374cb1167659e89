"""The floors hold: import-linter's contracts (pyproject.toml) pass on the tree and fail on a
planted uphill import or cycle; every module of bench/ is placed in the run or the tools."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from conftest import ROOT

PACKAGES = ("groundfloor", "engines", "tasks", "drafters", "methods", "bench")
# bench/ commands over the run, and engine_check's llama.cpp worker (run by its own venv)
ENTRY_POINTS = {
    "__init__",
    "__main__",
    "engine_check",
    "gpu_check",
    "profile_step",
    "kernel_check",
    "llamacpp_peer",
}


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    run = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", run, "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture()
def tree(tmp_path):
    """A copy of the packages and the contracts, to plant bad imports in."""
    for p in PACKAGES:
        shutil.copytree(
            ROOT / p, tmp_path / p, ignore=shutil.ignore_patterns("__pycache__", "kernels", "data")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def plant(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_contracts_pass_on_the_tree():
    r = lint_imports(ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "BROKEN" not in r.stdout and r.stdout.count("KEPT") >= 3


@pytest.mark.parametrize(
    "where, line, contract",
    [
        ("groundfloor/errors.py", "import engines.base", "Floors import only downward"),
        ("engines/base.py", "from methods import registry", "Floors import only downward"),
        (
            "methods/base.py",
            "def late():\n    from bench import runner",
            "Floors import only downward",
        ),
        ("bench/metrics.py", "from bench.report import tables", "never imports the top floor"),
        ("engines/cpu.py", "from engines import load", "No import cycles"),
    ],
)
def test_a_planted_bad_import_breaks_its_contract(tree, where, line, contract):
    plant(tree / where, line)
    r = lint_imports(tree)
    assert r.returncode != 0
    broken = [ln for ln in r.stdout.splitlines() if ln.rstrip().endswith("BROKEN")]
    assert any(contract in ln for ln in broken) or contract in r.stdout.split("Broken")[-1], (
        r.stdout[-3000:]
    )


def test_every_run_module_is_under_the_top_floor_contract():
    """A new file in bench/ must be listed as part of the run (forbidden to import the top
    floor) or be an entry point: no module escapes the contract by being new."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    run = next(c for c in cfg["contracts"] if c["type"] == "forbidden")["source_modules"]
    files = {p.stem for p in (ROOT / "bench").glob("*.py")}
    assert files - ENTRY_POINTS == {m.split(".", 1)[1] for m in run}
