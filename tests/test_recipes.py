"""docs/recipes.md's promises: a training-free method is its file and its YAML. A throwaway method
written into a copy of the tree is found by every list that names methods, and the tests that
cover every method (its knobs' bad-input cases from its YAML, greedy exactness against `ar`)
collect and pass on it with no other file touched. A method with a learned drafter is six files
and its weights (trained here for a few steps), and a task its YAML and its data, held the same
way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

PACKAGES = ("groundfloor", "engines", "tasks", "drafters", "methods", "bench", "train", "conf")

ECHO_PY = '''
"""`echo`: drafts the last committed token k times (a throwaway method for the recipe test)."""

from methods import sizing
from methods.base import Method, Proposal


class Echo(Method):
    name = "echo"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.policy = sizing.chain(self)  # k a round (or k=auto's choice: methods.auto)

    def draft(self, state) -> Proposal:
        k = self.policy.length()
        return Proposal(tokens=state.tokens[state.length - 1 : state.length].repeat(k))
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


def copy_tree(dest):
    """The packages, the tests and pyproject.toml copied into `dest` (no artifacts/)."""
    for p in (*PACKAGES, "tests"):
        shutil.copytree(ROOT / p, dest / p, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest)
    return dest


@pytest.fixture()
def tree(tmp_path):
    copy_tree(tmp_path)
    (tmp_path / "methods" / "echo.py").write_text(textwrap.dedent(ECHO_PY).lstrip())
    (tmp_path / "conf" / "method" / "echo.yaml").write_text(textwrap.dedent(ECHO_YAML).lstrip())
    return tmp_path


def in_tree(tree, *args, timeout=300, env=None):
    return subprocess.run(
        [sys.executable, *args], cwd=tree, capture_output=True, text=True, timeout=timeout, env=env
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


# --- a method with a learned drafter: six files and its weights ----------------------------

FOO_DRAFTER = '''
"""`foo`: a one-layer MLP over the target's last hidden state h_t predicting the token at t + 2
(the target's own output layer predicts t + 1): the recipe test's throwaway learned drafter.

Layout: foo.safetensors (the MLP's weights) and config.json (its sizes and the target's name).
"""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

WEIGHTS = "foo.safetensors"


class Foo(nn.Module):
    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, vocab))

    def forward(self, h):
        return self.net(h)


def save(net: Foo, out: Path, base: str, extra: dict | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().contiguous() for k, v in net.state_dict().items()}
    save_file(state, str(out / WEIGHTS))
    sizes = {"hidden_size": net.net[0].in_features, "vocab_size": net.net[2].out_features}
    cfg = {**sizes, "base_model_name_or_path": base, **(extra or {})}
    (out / "config.json").write_text(json.dumps(cfg, indent=2))


def load(path: Path) -> Foo:
    cfg = json.loads((path / "config.json").read_text())
    net = Foo(cfg["hidden_size"], cfg["vocab_size"])
    net.load_state_dict(load_file(str(path / WEIGHTS)))
    return net.eval().requires_grad_(False)


def random(target, path: Path, seed: int = 0) -> Path:
    """A randomly initialised foo for `target` (a transformers model) at `path`: what
    conf/drafter/foo.yaml's `_test.random` names, for the tests' and gpu-check's tiny targets."""
    torch.manual_seed(seed)
    save(Foo(target.config.hidden_size, target.config.vocab_size), path, "random")
    return path
'''

FOO_SPEC = '''
"""Training foo (drafters.foo) for `train.loop.train`: every answer position t, its input the
target's last hidden state h_t, its label the token at t + 2; cross-entropy over the vocabulary."""

from pathlib import Path

import torch

from drafters import foo
from train.specs import is_heldout


class FooSpec:
    @staticmethod
    def needed_layers(cfg) -> list[int]:
        return [-1]

    @classmethod
    def from_config(cls, data, target, cfg):
        return cls(data, target, int(cfg.drafter.batch_size), float(cfg.holdout), str(cfg.target))

    def __init__(self, data, target, batch_size: int, holdout: float, base: str):
        self.module = foo.Foo(target.config.hidden_size, target.config.vocab_size)
        self.batch_size, self.base = batch_size, base
        parts = {"train": ([], []), "eval": ([], [])}
        for seq in data:
            ids, t = seq["ids"].long(), torch.arange(seq["start"] - 1, len(seq["ids"]) - 2)
            h, y = parts["eval" if is_heldout(seq["id"], holdout) else "train"]
            h.append(seq["hidden"][-1][t].float())
            y.append(ids[t + 2])
        self.data = {k: (torch.cat(h), torch.cat(y)) for k, (h, y) in parts.items() if h}

    def batches(self, split: str, rng):
        h, y = self.data.get(split, (None, torch.zeros(0)))
        order = torch.randperm(len(y), generator=rng) if rng is not None else torch.arange(len(y))
        for b in range(0, len(y), self.batch_size):
            idx = order[b : b + self.batch_size]
            yield h[idx], y[idx]

    def step_loss(self, batch):
        h, y = batch
        logits = self.module(h)
        loss = torch.nn.functional.cross_entropy(logits, y)
        acc = (logits.argmax(-1) == y).float().mean()
        return loss, loss.detach()[None], acc.detach()[None]

    def save(self, out: Path, eval_result: dict) -> None:
        foo.save(self.module, out, self.base, extra={"eval": eval_result})
'''

FOO_DRAFTER_YAML = """
# foo: a one-layer MLP over the target's last hidden state (the recipe test's throwaway drafter).
_target_: train.foo_spec.FooSpec   # the training spec (its from_config reads the knobs below)
name: foo
batch_size: 64       # positions per step
steps: 300
patience: 3          # stop after this many evaluations without a better held-out loss
lr: 0.001
warmup: 10
eval_every: 50
eval_batches: 20     # held-out batches per evaluation
ckpt_every: 50
_test:               # for the tests only (training never reads it)
  random: drafters.foo.random   # a random foo for a tiny target (conftest's env, gpu-check)
"""

FOO_METHOD = '''
"""`foo`: drafters.foo's MLP drafts one token a round from the target's last hidden state (kept
from the verify forward); the target verifies it as a chain (methods.base.Method)."""

from dataclasses import dataclass
from pathlib import Path

import torch

from drafters import foo as foo_io
from groundfloor.errors import UserError
from methods import knobs, sizing
from methods.base import Method, Proposal


@dataclass(frozen=True)
class FooKnobs:  # defaults: conf/method/foo.yaml
    weights: str | None


class Foo(Method):
    name = "foo"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        kn = knobs.read(cfg, FooKnobs)
        self.policy = sizing.chain(self)  # k a round; the MLP drafts at most one of them
        path = kn.weights or ctx.model_cfg.get("foo")
        if not path:
            raise UserError("method=foo needs weights: set method.weights=<dir> or model.foo")
        ok = (Path(str(path)) / "config.json").is_file()
        knobs.need(self, ok, "weights", str(path), "give a folder `python -m train` wrote")
        self.net = foo_io.load(Path(str(path))).to(ctx.device)

    def static_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.net.parameters())

    def prefill(self, state) -> torch.Tensor:
        out = self.target.forward(state.tokens[None], state.cache, logits_to_keep=1, hidden=(-1,))
        state.aux["foo_h"] = out.hidden[-1][0, -1]
        return out.logits[0, -1]

    def draft(self, state) -> Proposal:
        if self.policy.length() < 1:
            return Proposal(tokens=state.ids.new_empty(0))
        with torch.no_grad():
            token = self.net(state.aux["foo_h"].float()).argmax(-1)
        return Proposal(tokens=token.view(1).to(state.ids), steps=1)

    def verify(self, state, proposal) -> torch.Tensor:
        ids = torch.cat([state.last, proposal.tokens])[None]
        out = self.target.forward(ids, state.cache, hidden=(-1,))
        state.aux["foo_rows"] = out.hidden[-1][0]
        return out.logits[0]

    def observe(self, state, proposal, acc) -> None:
        # the hidden state at the last accepted position: next round's input
        state.aux["foo_h"] = state.aux["foo_rows"][acc.n_draft_accepted]
'''

FOO_METHOD_YAML = """
# foo: its MLP drafts one token a round from the target's last hidden state (default: model.foo).
_target_: methods.foo.Foo
name: foo
k: 1                   # tokens drafted per round (the MLP drafts one)
weights: null          # a folder `python -m train drafter=foo` wrote; null: model.foo
alpha1_forced: {k: 1}  # the knobs that draft one token every round (bench.run.forced)
_test:
  bad:
    - knobs: {k: 0}
      says: "method.k=0 is not valid for foo; use an integer >= 1"
    - knobs: {weights: "/nonexistent"}
      says: "method.weights='/nonexistent' is not valid for foo"
    - knobs: {alpha1_forced: {depth: 1}}
      says: "is not valid for foo; use null or a mapping of this method's own knobs"
"""

FOO_FILES = {  # docs/recipes.md "A method with a learned drafter", its five new files
    "drafters/foo.py": FOO_DRAFTER,
    "train/foo_spec.py": FOO_SPEC,
    "conf/drafter/foo.yaml": FOO_DRAFTER_YAML,
    "methods/foo.py": FOO_METHOD,
    "conf/method/foo.yaml": FOO_METHOD_YAML,
}
MODEL = "conf/model/smollm2-135m.yaml"  # and its one line there: the shipped weights' folder
MODEL_LINE = "foo:    artifacts/smollm2-135m/foo   # shipped; python -m train drafter=foo\n"
WEIGHTS = "artifacts/smollm2-135m/foo"  # conf/train.yaml's default `out` for drafter=foo

FOO_LISTS = """
import sys

sys.path.insert(0, "tests")
from helpers import DRAFTERS

from bench.gate.experiment import method_names as gated
from bench.run.config import check_overrides
from bench.serve.server import PATH_KEYS
from bench.tools import gpu_check
from groundfloor.paths import ROOT, group_options
from methods.registry import method_names

check_overrides(["method=foo", "method.k=1"])
tiny = gpu_check.tiny_drafters(gpu_check.model("tiny", 0, 1.0), ROOT / "tiny-drafters")
shipped = gpu_check.shipped_drafters()
print("registry", "foo" in method_names())
print("conf_method", "foo" in group_options("method"))
print("conf_drafter", "foo" in group_options("drafter"))
print("gpu_check", "foo" in gpu_check.METHODS)
print("gpu_check_tiny", (tiny["foo"] / "config.json").is_file())
print("gpu_check_shipped", shipped.get("foo") == ROOT / "artifacts/smollm2-135m/foo")
print("gate", "foo" in gated({"methods": "all"}))
print("helpers", "foo" in DRAFTERS)
print("server", "foo" in PATH_KEYS)
"""


def snapshot(root) -> dict:
    """Every file under `root` (but bytecode caches) and its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.mark.slow
def test_a_learned_drafter_is_six_files_and_its_weights(tmp_path, tiny_target_dir):
    """docs/recipes.md's promise for a method with a learned drafter: its network, its training
    spec, its training YAML, its method, its method YAML and one line of the model config. In a
    copy of the tree those six files (a throwaway one-layer MLP, `foo`) (a) train for a few
    steps with `python -m train drafter=foo` on the tiny target, its weights written where the
    model config's line names them; (b) are found by every list that names methods or drafters;
    (c) pass the tests that cover every method and every learned drafter; and (d) nothing else
    in the tree changed."""
    tree = copy_tree(tmp_path / "tree")
    before = snapshot(tree)
    for rel, text in FOO_FILES.items():
        (tree / rel).write_text(textwrap.dedent(text).lstrip())
    with open(tree / MODEL, "a") as f:
        f.write(MODEL_LINE)

    prompts = tmp_path / "prompts.jsonl"
    words = "write a short poem about the sea and explain the answer step by step".split()
    rows = [{"question_id": f"t{i}", "category": "general", "turns": [" ".join(words[i:][:6])]}
            for i in range(8)]  # fmt: skip
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = dict(os.environ, SPECSWEEP_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    r = in_tree(
        tree,
        "-m",
        "train",
        "drafter=foo",
        f"target={tiny_target_dir}",
        f"prompts={prompts}",
        "max_new_tokens=12",
        "layers=[-1]",
        "distill.batch=4",
        "drafter.steps=6",
        "drafter.eval_every=3",
        "drafter.ckpt_every=3",
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((tree / WEIGHTS / "train_summary.json").read_text())
    assert summary["drafter"] == "foo" and summary["steps"] == 6 and summary["top1_per_pos"]
    assert {"config.json", "foo.safetensors"} <= {p.name for p in (tree / WEIGHTS).iterdir()}

    r = in_tree(tree, "-c", textwrap.dedent(FOO_LISTS))
    assert r.returncode == 0, r.stderr[-3000:]
    found = dict(line.split() for line in r.stdout.splitlines())
    assert found == dict.fromkeys(found, "True") and len(found) == 9, found
    shutil.rmtree(tree / "tiny-drafters")

    tests = ["tests/test_knobs.py", "tests/test_lossless_greedy.py", "tests/test_alpha1.py"]
    r = in_tree(
        tree, "-m", "pytest", *tests, "-k", "foo", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist"
    )
    assert r.returncode == 0, r.stdout[-3000:]
    passed = {line.split("::")[-1].split()[0] for line in r.stdout.splitlines() if "PASSED" in line}
    # built with its defaults (conftest's env: a random foo from its YAML's `_test.random`),
    # its typed knob, its YAML's bad cases, exact against ar, its α₁ pass drafting one token
    assert passed >= {
        "test_every_method_builds_with_its_defaults[foo]",
        "test_each_typed_knob_refuses_the_wrong_type[foo-k]",
        "test_each_bad_knob_is_one_line[foo-k]",
        "test_each_bad_knob_is_one_line[foo-weights]",
        "test_each_bad_knob_is_one_line[foo-alpha1_forced]",
        "test_every_method_reproduces_its_baseline[foo]",
        "test_each_learned_drafter_drafts_one_token_every_round_in_the_pass[foo]",
    }, r.stdout[-3000:]

    after = snapshot(tree)
    changed = {p for p in after.keys() | before.keys() if after.get(p) != before.get(p)}
    weights = {p for p in changed if p.startswith(WEIGHTS + "/")}
    assert changed - weights == {*FOO_FILES, MODEL}, sorted(changed - weights)
    assert len(changed - weights) <= 6


# --- a task: its YAML and its data ----------------------------------------------------------

TASK_YAML = """
# Questions about the imaginary island of Quillmere (the recipe test's throwaway task).
name: foo
source: builtin
category: qa
file: foo.jsonl
template: "{turn}"
max_new_tokens: 64
version: 1
truncate: null   # left | right: shorten prompts longer than the context; null: leave them out
"""

TASK_QUESTIONS = [
    "Which river of Quillmere freezes first when the zephyrwind arrives early?",
    "How many lighthouses guard the crooked harbour of Vantry Moss?",
    "Name the festival where Quillmere weavers trade indigo for salted plums.",
    "Why do the ferrymen of Oskelby refuse to sail under a copper moon?",
]


def test_a_task_is_its_yaml_and_its_data(tmp_path):
    """docs/recipes.md's promise for a task: conf/task/foo.yaml and tasks/data/foo.jsonl
    (Spec-Bench's question format), written into a copy of the tree, are found by the task
    lists, load their prompts, and pass the tests that cover every task and every built-in set
    (schema, offline load, disjointness from the other sets, from the training prompts and
    within the set)."""
    tree = copy_tree(tmp_path)
    (tree / "conf" / "task" / "foo.yaml").write_text(textwrap.dedent(TASK_YAML).lstrip())
    rows = [
        {"question_id": f"foo-{i:03d}", "category": "qa", "subcategory": "island", "turns": [q]}
        for i, q in enumerate(TASK_QUESTIONS, 1)
    ]
    (tree / "tasks" / "data" / "foo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    lists = textwrap.dedent("""
        from bench.run.config import check_overrides, compose
        from groundfloor.paths import group_options
        from tasks.loader import _task_cfg, load_prompts, task_names
        from tasks.overlap import benchmark_sets

        check_overrides(["task=foo"])
        print("conf", "foo" in group_options("task"))
        print("loader", "foo" in task_names())
        print("run", compose(["task=foo"]).task.name == "foo")
        print("prompts", len(load_prompts(_task_cfg("foo"))) == 4)
        print("overlap", len(benchmark_sets()["foo"]) == 4)
    """)
    r = in_tree(tree, "-c", lists)
    assert r.returncode == 0, r.stderr[-3000:]
    found = dict(line.split() for line in r.stdout.splitlines())
    assert found == dict.fromkeys(["conf", "loader", "run", "prompts", "overlap"], "True"), found

    r = in_tree(tree, "-m", "tasks", "foo", "--tokenizer", "none")
    assert r.returncode == 0, r.stderr[-3000:]
    assert any(line.split()[:3] == ["foo", "qa", "4"] for line in r.stdout.splitlines()), r.stdout

    tests = ["tests/test_tasks.py", "tests/test_overlap.py"]
    every = "foo or disjoint_from_each_other or share_nothing_with_training"
    r = in_tree(
        tree, "-m", "pytest", *tests, "-k", every, "-rA", "-p", "no:cacheprovider", "-p", "no:xdist"
    )
    assert r.returncode == 0, r.stdout[-3000:]
    passed = {line.split("::")[-1].split()[0] for line in r.stdout.splitlines() if "PASSED" in line}
    assert passed >= {
        "test_task_yaml_schema[foo]",
        "test_every_task_loads_offline_or_says_why[foo]",
        "test_no_near_duplicates_within_a_set[foo]",
        "test_builtin_sets_are_disjoint_from_each_other",
        "test_builtin_sets_share_nothing_with_training_prompts",
    }, r.stdout[-3000:]
