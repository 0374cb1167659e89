"""docs/recipes.md's promise: a training-free method is its file and its YAML. A throwaway method
written into a copy of the tree is found by every list that names methods, and the tests that
cover every method (its knobs' bad-input cases from its YAML, greedy exactness against `ar`)
collect and pass on it with no other file touched."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

PACKAGES = ("groundfloor", "engines", "tasks", "drafters", "methods", "bench", "train", "conf")

ECHO_PY = '''
"""`echo`: drafts the last committed token k times (a throwaway method for the recipe test)."""

from methods.base import Method, Proposal


class Echo(Method):
    name = "echo"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.k = self.chain_k()

    def draft(self, state) -> Proposal:
        return Proposal(tokens=state.tokens[state.length - 1 : state.length].repeat(self.k))
'''

ECHO_YAML = """
# Echo: the last token again, k times.
_target_: methods.echo.Echo
name: echo
k: 2
_test:
  bad:
    - knobs: {k: 0}
      says: "method.k=0 is not valid for echo; use an integer >= 1"
"""

LISTS = """
from bench.gate.experiment import method_names as gated
from bench.run.config import check_overrides
from bench.tools.gpu_check import METHODS
from groundfloor.paths import group_options
from methods.registry import method_names

check_overrides(["method=echo", "method.k=3"])
print("registry", "echo" in method_names())
print("conf", "echo" in group_options("method"))
print("gpu_check", "echo" in METHODS)
print("gate", "echo" in gated({"methods": "all"}))
"""


@pytest.fixture()
def tree(tmp_path):
    for p in PACKAGES:
        shutil.copytree(ROOT / p, tmp_path / p, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        ROOT / "tests", tmp_path / "tests", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "methods" / "echo.py").write_text(textwrap.dedent(ECHO_PY).lstrip())
    (tmp_path / "conf" / "method" / "echo.yaml").write_text(textwrap.dedent(ECHO_YAML).lstrip())
    return tmp_path


def in_tree(tree, *args, timeout=300):
    return subprocess.run(
        [sys.executable, *args], cwd=tree, capture_output=True, text=True, timeout=timeout
    )


def test_a_new_method_is_its_file_and_its_yaml(tree):
    r = in_tree(tree, "-c", LISTS)
    assert r.returncode == 0, r.stderr[-2000:]
    found = dict(line.split() for line in r.stdout.splitlines())
    assert found == dict.fromkeys(["registry", "conf", "gpu_check", "gate"], "True"), found

    tests = ["tests/test_knobs.py", "tests/test_lossless_greedy.py"]
    r = in_tree(
        tree,
        "-m",
        "pytest",
        *tests,
        "-k",
        "echo",
        "-rA",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
    )
    assert r.returncode == 0, r.stdout[-3000:]
    passed = {line.split("::")[-1].split()[0] for line in r.stdout.splitlines() if "PASSED" in line}
    # built with its defaults, its typed knob, its bad case from its YAML, exact against ar
    assert passed >= {
        "test_every_method_builds_with_its_defaults[echo]",
        "test_each_typed_knob_refuses_the_wrong_type[echo-k]",
        "test_each_bad_knob_is_one_line[echo-k]",
        "test_every_method_reproduces_its_baseline[echo]",
    }, r.stdout[-3000:]
