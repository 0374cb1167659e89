"""The A/B gate: its speed rule on hand-made trees (bench/gate/paired.py), and end to end on a
tiny model in a throwaway git repository: the recorded commit against itself passes, the same
tree with a planted delay in every target forward fails, and a baseline naming a commit without
a gate worker is refused."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from bench.gate import paired
from groundfloor.paths import ROOT

METHODS = ("ar", "ngram", "suffix", "eagle")
N = 17


def tree(factor: dict[str, float], noise: float, seed: int, offset: float = 1.0) -> dict:
    """{method: {unit: {"tokens_per_s"}}}: per-unit speeds with lognormal noise, × factor[m]."""
    rng = np.random.default_rng(seed)
    base = {m: 40.0 * (1 + 0.2 * i) for i, m in enumerate(METHODS)}
    return {
        m: {
            f"p{u}/0": {
                "tokens_per_s": base[m]
                * (1 + 0.3 * math.sin(u))
                * factor.get(m, 1.0)
                * offset
                * math.exp(rng.normal(0, noise))
            }
            for u in range(N)
        }
        for m in METHODS
    }


def trees(b_factor: dict[str, float], noise: float = 0.03, seed: int = 0, offset: float = 1.0):
    return {
        "A": tree({}, noise, seed),
        "B": tree(b_factor, noise, seed + 1, offset),
        "A′": tree({}, noise, seed + 2),
    }


def failed(rows) -> list[tuple[str, str]]:
    return sorted((r.method, r.metric) for r in rows if r.failed)


def test_an_unchanged_tree_passes_and_a_15_percent_slower_method_fails():
    for seed in range(5):
        assert failed(paired.speed_rows(trees({}, seed=seed), 0.15)) == []
    rows = paired.speed_rows(trees({"ngram": 0.85}), 0.15)
    assert failed(rows) == [("ngram", "speedup"), ("ngram", "tokens_per_s")]
    # the target slower for everyone: every method's tokens/s fails, ar's included
    rows = paired.speed_rows(trees({m: 0.8 for m in METHODS}), 0.15)
    assert {m for m, metric in failed(rows) if metric == "tokens_per_s"} == set(METHODS)


def test_the_threshold_counts_a_difference_between_processes_as_noise():
    t = trees({})
    t["A′"] = tree({}, 0.03, 2, offset=0.9)  # one worker of the same tree 10% slower
    rule = [r for r in paired.speed_rows(t, 0.15) if r.metric == "tokens_per_s"][0].rule
    assert re.search(r"A′/A -(9|10|11)\.\d%", rule), rule
    # B as far from A as A′ is does not fail, though the floor alone (−7.8%) would
    assert failed(paired.speed_rows({**t, "B": tree({}, 0.03, 5, offset=0.9)}, 0.15)) == []


def test_noise_widens_the_threshold_and_power_is_reported():
    rows = paired.speed_rows(trees({}, noise=0.6), 0.15)
    assert all(r.verdict == "underpowered" for r in rows), [r.rule for r in rows]
    quiet = paired.speed_rows(trees({}, noise=0.01), 0.15)
    assert all(r.verdict in ("ok", "better") for r in quiet)


def test_missing_and_new_methods():
    t = trees({})
    del t["B"]["suffix"]
    t["B"]["sam"] = t["B"]["ngram"]
    rows = paired.speed_rows(t, 0.15)
    verdicts = {(r.method, r.verdict) for r in rows}
    assert ("suffix", "missing") in verdicts and ("sam", "new") in verdicts
    assert "suffix" in {r.method for r in rows if r.failed}


def test_simulated_rates_from_the_runs_own_units():
    false, caught = paired.simulate(trees({}, noise=0.03), 0.15)
    assert false <= 0.05 and min(caught.values()) >= 0.9
    false, caught = paired.simulate(trees({}, noise=0.6), 0.15)
    assert min(caught.values()) < 0.9  # too noisy to catch a 15% drop: said, not hidden


# --- end to end in a throwaway repository ------------------------------------------------------
def git(*args, cwd):
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )


def gate(repo, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "bench.gate", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo), **(env or {})},
        timeout=600,
    )


@pytest.fixture
def repo(tmp_path):
    """This checkout's code (no artifacts) committed in a new repository."""
    dest = tmp_path / "repo"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    for f in listed:
        if not f.startswith(("artifacts/", "results/", "reports/")) and (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    git("init", "-q", cwd=dest)
    git("add", "-A", cwd=dest)
    git("commit", "-q", "-m", "tree under test", cwd=dest)
    return dest


@pytest.mark.slow
def test_ab_gate_passes_an_unchanged_tree_and_fails_a_slower_one(repo, tiny_target_dir, tmp_path):
    exp = tmp_path / "gate.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "overrides": [
                    "model=hf",
                    f"model.target={tiny_target_dir}",
                    "model.dtype=float32",
                    "device=cpu",
                    "task=code",
                    "limit=3",
                    "max_new_tokens=16",
                    "repeats=1",
                    "warmup=1",
                    "temperature=0",
                    "device.threads=1",
                ],
                "methods": ["ar", "ngram"],
                "baseline": "baseline.json",
                "record_repeats": 2,
                # tiny-model timings beside a parallel test suite are noisy: the floor is at
                # −68%; the planted delay makes every forward ~20× slower
                "speedup_tol": 0.9,
            }
        )
    )
    recorded = gate(repo, "--experiment", str(exp), "--update")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    head = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    assert json.loads((tmp_path / "baseline.json").read_text())["commit"] == head

    same = gate(repo, "--experiment", str(exp))
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-3000:]
    assert f"A = {head[:12]} (recorded), B = {head}" in same.stdout
    assert "PASS" in same.stdout and "false alarms" in same.stdout

    slow = gate(repo, "--experiment", str(exp), "--plant-delay", "40")
    assert slow.returncode == 1, slow.stdout[-3000:] + slow.stderr[-3000:]
    assert "FAIL: regression in ar, ngram" in slow.stdout
    assert "tokens_vs_A" in slow.stdout  # the same ids: only the speed failed

    # a baseline naming a commit without the worker is refused with one line
    (repo / "bench" / "gate" / "worker.py").unlink()
    git("commit", "-q", "-am", "no worker", cwd=repo)
    doc = json.loads((tmp_path / "baseline.json").read_text())
    doc["commit"] = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    (tmp_path / "baseline.json").write_text(json.dumps(doc))
    git("checkout", "-q", head, "--", "bench/gate/worker.py", cwd=repo)
    refused = gate(repo, "--experiment", str(exp))
    assert refused.returncode == 2 and "has no gate worker" in refused.stderr
