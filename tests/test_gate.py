"""The regression gate: verdict rules on hand-made summaries, and the gate end to end on a tiny
model, where an unchanged tree passes and planted regressions (a baseline demanding more; a
config that drafts fewer tokens) make it exit non-zero."""

from __future__ import annotations

import json

import pytest
import yaml

from bench.config import group_options
from bench.gate import run as gate
from bench.gate.rules import Tolerances, compare, env_problems
from groundfloor.errors import UserError

TOL = Tolerances(tau_tol=0.02, exact_match_tol=0.0, speedup_tol=0.15)
BASE = {
    "ar": {
        "tau": 1.0,
        "exact_match": 1.0,
        "speedup": 1.0,
        "speedup_ci_low": 0.95,
        "speedup_ci_high": 1.05,
    },
    "ngram": {
        "tau": 2.0,
        "exact_match": 1.0,
        "speedup": 1.6,
        "speedup_ci_low": 1.4,
        "speedup_ci_high": 1.8,
    },
}


def now(**changes):
    out = json.loads(json.dumps(BASE))
    for key, value in changes.items():
        method, metric = key.split("__")
        out[method][metric] = value
    return out


def verdicts(rows):
    return {(r.method, r.metric): r.verdict for r in rows}


def failed(rows):
    return sorted({r.method for r in rows if r.failed})


def test_unchanged_passes():
    rows = compare(BASE, now(), TOL)
    assert failed(rows) == [] and set(verdicts(rows).values()) == {"ok"}


def test_tau_drop_beyond_tolerance_fails():
    assert failed(compare(BASE, now(ngram__tau=2.0 * 0.97), TOL)) == ["ngram"]
    assert failed(compare(BASE, now(ngram__tau=2.0 * 0.99), TOL)) == []  # within 2%


def test_any_exact_match_drop_fails():
    rows = compare(BASE, now(ngram__exact_match=0.75), TOL)
    assert verdicts(rows)[("ngram", "exact_match")] == "REGRESSION"
    assert failed(compare(BASE, now(ngram__exact_match=None), TOL)) == ["ngram"]


def test_speedup_fails_only_when_interval_lies_below_tolerance():
    # point estimate far down but the interval still reaches the floor 1.6 × 0.85 = 1.36: noise
    noisy = now(ngram__speedup=1.1, ngram__speedup_ci_low=0.7, ngram__speedup_ci_high=1.4)
    assert failed(compare(BASE, noisy, TOL)) == []
    slow = now(ngram__speedup=1.2, ngram__speedup_ci_low=1.1, ngram__speedup_ci_high=1.3)
    assert verdicts(compare(BASE, slow, TOL))[("ngram", "speedup")] == "REGRESSION"


def test_rises_pass_and_are_reported():
    rows = compare(
        BASE,
        now(
            ngram__tau=2.5,
            ngram__speedup=2.5,
            ngram__speedup_ci_low=2.2,
            ngram__speedup_ci_high=2.8,
        ),
        TOL,
    )
    assert failed(rows) == []
    assert verdicts(rows)[("ngram", "tau")] == "better"
    assert verdicts(rows)[("ngram", "speedup")] == "better"


def test_missing_method_fails_and_new_method_passes():
    current = now()
    del current["ngram"]
    rows = compare(BASE, current, TOL, skipped={"ngram": "needs a drafter"})
    assert failed(rows) == ["ngram"] and "needs a drafter" in rows[-1].rule
    current = now()
    current["eagle"] = dict(current["ngram"])
    rows = compare(BASE, current, TOL)
    assert failed(rows) == [] and verdicts(rows)[("eagle", "tau")] == "new"


def test_baseline_from_another_model_blocks():
    blocking, notes = env_problems(
        {"model": "a", "device": "cpu", "dtype": "float32", "cpu": "x"},
        {"model": "b", "device": "cpu", "dtype": "float32", "cpu": "y"},
    )
    assert len(blocking) == 1 and "model" in blocking[0] and "cpu" in notes[0]


def test_all_methods_come_from_the_config_group():
    assert gate.method_names({"methods": "all"}) == group_options("method")
    skipped = gate.method_names({"methods": "all", "skip_methods": ["hf_pld", "hf_assisted"]})
    assert set(group_options("method")) - set(skipped) == {"hf_pld", "hf_assisted"}
    with pytest.raises(Exception, match="unknown"):
        gate.method_names({"methods": ["nope"]})


def test_committed_experiment_and_baseline_agree():
    """gate.yaml is loadable, pins T=0 and its kernels on the CPU, and its baseline covers every
    method the gate runs: a method that --update dropped (or that stopped running) fails here
    instead of passing forever as "new"."""
    exp = gate.load_experiment(gate.EXPERIMENT)
    assert {"temperature=0", "model.weights=int8", "model.kernel=native", "device=cpu"} <= set(
        exp["overrides"]
    )
    base = json.loads(exp["baseline_path"].read_text())
    assert base["overrides"] == exp["overrides"]
    gated = set(gate.method_names(exp))
    assert set(base["methods"]) == gated, f"not in the baseline: {gated - set(base['methods'])}"
    assert not base.get("skipped"), base.get("skipped")
    assert base["methods"]["ar"]["tau"] == 1.0


# --- end to end on the tiny model ---
@pytest.fixture
def experiment(tiny_target_dir, tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "overrides": [
                    "model=hf",
                    f"model.target={tiny_target_dir}",
                    "model.dtype=float32",
                    "device=cpu",
                    "task=code",
                    "limit=2",
                    "max_new_tokens=16",
                    "repeats=2",
                    "remeasure=0",
                    "warmup=0",
                    "temperature=0",
                    "device.threads=1",
                ],
                "methods": ["ar", "ngram", "draft"],  # draft: skipped, no drafter configured
                "method_overrides": {"ngram": ["method.max_n=3"]},
                "baseline": "baseline.json",
                "tau_tol": 0.02,
                "exact_match_tol": 0.0,
                # tiny-model timings are noise; τ and exact_match are the plants
                "speedup_tol": 0.9,
            }
        )
    )
    return path


def test_gate_end_to_end(experiment, capsys):
    baseline = experiment.parent / "baseline.json"
    assert gate.main(["--experiment", str(experiment)]) == 2  # no baseline yet
    assert gate.main(["--experiment", str(experiment), "--update"]) == 0
    doc = json.loads(baseline.read_text())
    assert set(doc["methods"]) == {"ar", "ngram"} and "draft" in doc["skipped"]
    assert doc["method_overrides"] == {"ngram": ["method.max_n=3"]}
    assert doc["methods"]["ngram"]["tau"] > 1.0

    capsys.readouterr()
    assert gate.main(["--experiment", str(experiment)]) == 0  # unchanged tree: passes
    out = capsys.readouterr().out
    assert "PASS" in out and "ngram" in out and "REGRESSION" not in out

    # planted: the config now drafts 1 token per round instead of 8, so τ drops
    assert gate.main(["--experiment", str(experiment), "k=1"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "FAIL: regression in ngram" in out

    # planted: a baseline demanding more τ and speedup than the tree delivers
    doc["methods"]["ngram"]["tau"] *= 1.1
    doc["methods"]["ar"]["speedup"] *= 100
    baseline.write_text(json.dumps(doc))
    assert gate.main(["--experiment", str(experiment)]) == 1
    assert "FAIL: regression in ar, ngram" in capsys.readouterr().out


def test_method_overrides_must_be_lists(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump({"overrides": [], "method_overrides": {"eagle": "k=1"}}))
    with pytest.raises(UserError, match="method_overrides"):
        gate.load_experiment(path)
