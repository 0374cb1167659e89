"""The regression gate: verdict rules on hand-made units, the refusals, and the gate end to end
on a tiny model, where an unchanged tree passes and planted regressions (a baseline demanding
more; a config that drafts fewer tokens) make it exit non-zero. Its power on the recorded noise:
tests/test_gate_power.py."""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest
import yaml

from bench.gate import run as gate
from bench.gate.rules import Tolerances, compare, env_problems, power, threshold
from bench.run.config import group_options
from groundfloor.errors import UserError
from groundfloor.provenance import dirty_files

TOL = Tolerances(tau_tol=0.02, exact_match_tol=0.0, speedup_tol=0.15)
N = 16
IDS = {f"p{i}/0": [i, i + 1, i + 2] for i in range(N)}


def units(speedup: float, noise: float = 0.02, forwards: int = 3, seed: int = 0, ids=IDS):
    """N units of 3 new tokens each, log pair ratios log(speedup) + N(0, noise²)."""
    e = np.random.default_rng(seed).normal(0, noise, N)
    return {
        u: {
            "log_ratio": math.log(speedup) + float(e[i]),
            "repeats": [math.log(speedup) + float(e[i])] * 2,
            "new_tokens": 3,
            "forwards": forwards,
            "ids": list(v),
            "reference": list(IDS[u]),
        }
        for i, (u, v) in enumerate(ids.items())
    }


def cell(speedup, forwards=3, exact=1.0, seed=0, noise=0.02, ids=IDS, tps=100.0):
    return {
        "summary": {"exact_match": exact, "tokens_per_s": tps},
        "units": units(speedup, noise, forwards, seed, ids),
    }


BASE = {
    "outputs": IDS,
    "methods": {"ar": cell(1.0, forwards=3), "ngram": cell(1.6, forwards=2)},
}


def now(seed=1, **cells):
    out = {"ar": cell(1.0, forwards=3, seed=seed), "ngram": cell(1.6, forwards=2, seed=seed + 7)}
    out.update(cells)
    return out


def verdicts(rows):
    return {(r.method, r.metric): r.verdict for r in rows}


def failed(rows):
    return sorted({r.method for r in rows if r.failed})


def test_unchanged_passes():
    rows = compare(BASE, now(), TOL)
    assert failed(rows) == [] and set(verdicts(rows).values()) == {"ok"}


def test_tau_drop_beyond_tolerance_fails():
    # ngram now needs 3 forwards per unit instead of 2: τ 1.5 → 1.0
    assert failed(compare(BASE, now(ngram=cell(1.6, forwards=3, seed=8)), TOL)) == ["ngram"]


def test_any_exact_match_drop_or_changed_token_fails():
    rows = compare(BASE, now(ngram=cell(1.6, forwards=2, exact=0.75, seed=8)), TOL)
    assert verdicts(rows)[("ngram", "exact_match")] == "REGRESSION"
    changed = dict(IDS, **{"p3/0": [9, 9, 9]})
    rows = compare(BASE, now(ngram=cell(1.6, forwards=2, seed=8, ids=changed)), TOL)
    assert verdicts(rows)[("ngram", "tokens")] == "REGRESSION"
    assert verdicts(rows)[("ngram", "exact_match")] == "ok"


def test_a_15_percent_slowdown_fails_and_noise_does_not():
    rows = compare(BASE, now(ngram=cell(1.6 * 0.85, forwards=2, seed=8)), TOL)
    assert verdicts(rows)[("ngram", "speedup")] == "REGRESSION"
    rows = compare(BASE, now(ngram=cell(1.6 * 0.97, forwards=2, seed=8)), TOL)
    assert verdicts(rows)[("ngram", "speedup")] == "ok"  # 3%: inside the threshold


def test_threshold_follows_the_measured_noise():
    half = -math.log(0.85) / 2
    assert threshold(0.001, 0.15) == pytest.approx(half)  # quiet: halfway to the drop to catch
    assert threshold(0.1, 0.15) == pytest.approx(1.6449 * 0.1, rel=1e-3)  # noisy: 5% false alarms
    assert power(0.01, 0.15) > 0.999 and 0.4 < power(0.1, 0.15) < 0.6  # t ≈ the drop itself
    # a noisy AR-against-AR cell widens the threshold: the run is "underpowered", not failed
    noisy = now(ar=cell(1.0, forwards=3, seed=1, noise=0.5), ngram=cell(1.6 * 0.9, 2, seed=8))
    assert verdicts(compare(BASE, noisy, TOL))[("ngram", "speedup")] == "underpowered"
    assert failed(compare(BASE, noisy, TOL)) == []


def test_a_slowdown_of_everything_alike_fails_the_machine_wide_tokens_per_s_row():
    """ar and ngram 20% slower alike: their speedups do not move, only tokens/s can tell."""
    slower = now(ar=cell(1.0, 3, seed=1, tps=80.0), ngram=cell(1.6, 2, seed=8, tps=80.0))
    rows = compare(BASE, slower, TOL)
    v = verdicts(rows)
    assert v[("ngram", "speedup")] == "ok" and v[("all", "tokens_per_s")] == "REGRESSION"
    assert failed(rows) == ["all"]
    drift = now(ar=cell(1.0, 3, seed=1, tps=90.0), ngram=cell(1.6, 2, seed=8, tps=90.0))
    assert verdicts(compare(BASE, drift, TOL))[("all", "tokens_per_s")] == "ok"  # −10%: drift
    base, run = many({})  # one method of seven at half its tokens/s is not machine-wide
    run["sam"]["summary"]["tokens_per_s"] = 50.0
    assert verdicts(compare(base, run, TOL))[("all", "tokens_per_s")] == "ok"


def test_rises_pass_and_are_reported():
    rows = compare(BASE, now(ngram=cell(2.5, forwards=1, seed=8)), TOL)
    assert failed(rows) == []
    assert verdicts(rows)[("ngram", "tau")] == "better"
    assert verdicts(rows)[("ngram", "speedup")] == "better"


def test_another_cpu_kind_checks_tokens_but_does_not_gate_speedup():
    other = dict(IDS, **{"p2/0": [7, 7, 7]})  # this machine's AR stream differs on one unit
    run = now(ngram=cell(1.6 * 0.5, forwards=2, seed=8))
    for c in run.values():
        c["units"]["p2/0"]["reference"] = c["units"]["p2/0"]["ids"] = other["p2/0"]
    rows = compare(BASE, run, TOL, same_kind=False)
    v = verdicts(rows)
    assert v[("ngram", "speedup")] == "not gated" and v[("ngram", "tokens")] == "ok"
    assert failed(rows) == [] and "1 left out" in rows[0].rule


def test_missing_method_fails_and_new_method_passes():
    current = now()
    del current["ngram"]
    rows = compare(BASE, current, TOL, skipped={"ngram": "needs a drafter"})
    ngram = [r for r in rows if r.method == "ngram"]
    assert failed(rows) == ["ngram"] and "needs a drafter" in ngram[-1].rule
    rows = compare(BASE, now(eagle=cell(1.2)), TOL)
    assert failed(rows) == [] and verdicts(rows)[("eagle", "tau")] == "new"


def test_baseline_from_another_model_blocks():
    blocking, notes = env_problems(
        {"model": "a", "device": "cpu", "dtype": "float32", "torch": "1"},
        {"model": "b", "device": "cpu", "dtype": "float32", "torch": "2"},
    )
    assert len(blocking) == 1 and "model" in blocking[0] and "torch" in notes[0]


def test_all_methods_come_from_the_config_group():
    assert gate.method_names({"methods": "all"}) == group_options("method")
    skipped = gate.method_names({"methods": "all", "skip_methods": ["hf_pld", "hf_assisted"]})
    assert set(group_options("method")) - set(skipped) == {"hf_pld", "hf_assisted"}
    with pytest.raises(Exception, match="unknown"):
        gate.method_names({"methods": ["nope"]})


def test_committed_experiment_and_baseline_agree():
    """gate.yaml is loadable, pins T=0 and its kernels on the CPU, and every entry of its
    baseline covers every method the gate runs on ≥ 16 units, measured from a commit (not a
    modified tree): a method that --update dropped fails here instead of passing as "new"."""
    exp = gate.load_experiment(gate.EXPERIMENT)
    assert {"temperature=0", "model.weights=auto", "model.kernel=native_q8a", "device=cpu"} <= set(
        exp["overrides"]
    )
    base = json.loads(exp["baseline_path"].read_text())
    assert base["overrides"] == exp["overrides"] and base["machines"]
    # the A side of the A/B gate: a clean commit with a gate worker, every entry measured there
    assert base["commit"] and all(e["commit"] == base["commit"] for e in base["machines"].values())
    has_worker = subprocess.run(
        ["git", "cat-file", "-e", f"{base['commit']}:bench/gate/worker.py"], capture_output=True
    )
    assert has_worker.returncode == 0, f"{base['commit']} has no bench/gate/worker.py"
    gated = set(gate.method_names(exp))
    for kind, entry in base["machines"].items():
        assert set(entry["methods"]) == gated, f"{kind}: {gated ^ set(entry['methods'])}"
        assert not entry.get("skipped"), entry.get("skipped")
        assert entry["commit"] and not entry["commit"].endswith("-dirty")
        assert len(entry["outputs"]) >= 16
        for m, d in entry["methods"].items():
            assert set(d["units"]) == set(entry["outputs"]), m
            assert all(u["exact"] for u in d["units"].values()), m
        assert all(
            u["forwards"] == u["new_tokens"] for u in entry["methods"]["ar"]["units"].values()
        )


# --- refusals ------------------------------------------------------------------------------
def test_dirty_files_names_modified_tracked_files(tmp_path):
    git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "a")
    (tmp_path / "new.py").write_text("untracked\n")
    assert dirty_files(tmp_path) == []
    (tmp_path / "a.py").write_text("x = 2\n")
    assert dirty_files(tmp_path) == ["a.py"]


def test_update_from_a_modified_tree_is_refused_before_measuring(experiment, monkeypatch):
    monkeypatch.setattr(gate, "dirty_files", lambda: ["methods/ngram.py"])
    monkeypatch.setattr(gate, "measure", lambda *a: pytest.fail("measured"))
    with pytest.raises(UserError, match=r"modified tree \(methods/ngram.py\)"):
        gate.gate(experiment, [], True, None)


def test_update_writes_nothing_when_the_tree_changes_while_it_measures(experiment, monkeypatch):
    baseline = experiment.parent / "baseline.json"
    states = iter([[], ["docs/training.md"]])  # clean when it starts, edited by the end
    monkeypatch.setattr(gate, "dirty_files", lambda: next(states))
    monkeypatch.setattr(gate, "head_commit", lambda: "a" * 40)
    env = {"cpu_kind": "x", "git_sha": "a" * 40 + "-dirty"}
    monkeypatch.setattr(gate, "measure", lambda *a: ({"ar": {}}, {}, env))
    with pytest.raises(UserError, match=r"changed while the gate measured.*docs/training.md"):
        gate.gate(experiment, [], True, None)
    assert not baseline.exists()

    heads = iter(["a" * 40, "b" * 40])  # a commit landed during the run
    monkeypatch.setattr(gate, "dirty_files", lambda: [])
    monkeypatch.setattr(gate, "head_commit", lambda: next(heads))
    with pytest.raises(UserError, match=f"HEAD moved from {'a' * 40} to {'b' * 40}"):
        gate.gate(experiment, [], True, None)
    assert not baseline.exists()


def test_a_gate_without_ar_is_refused(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump({"overrides": [], "methods": ["ngram"]}))
    with pytest.raises(UserError, match="must include ar"):
        gate.gate(path, [], False, None)


def test_method_overrides_must_be_lists(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump({"overrides": [], "method_overrides": {"eagle": "k=1"}}))
    with pytest.raises(UserError, match="method_overrides"):
        gate.load_experiment(path)


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
                    "repeats=1",
                    "remeasure=0",
                    "warmup=0",
                    "temperature=0",
                    "device.threads=1",
                ],
                "methods": ["ar", "ngram", "draft"],  # draft: skipped, no drafter configured
                "method_overrides": {"ngram": ["method.max_n=3"]},
                "baseline": "baseline.json",
                "record_repeats": 2,
                "tau_tol": 0.02,
                "exact_match_tol": 0.0,
                # tiny-model timings are noise; τ, the tokens and exact_match are the plants
                "speedup_tol": 0.9,
                "machine_tps_tol": 0.9,
            }
        )
    )
    return path


def test_gate_end_to_end(experiment, capsys, monkeypatch):
    monkeypatch.setattr(gate, "dirty_files", lambda: [])  # the checkout under test may be edited
    baseline = experiment.parent / "baseline.json"
    assert gate.main(["--experiment", str(experiment)]) == 2  # no baseline yet
    assert gate.main(["--experiment", str(experiment), "--update"]) == 0
    assert "simulated runs" in capsys.readouterr().out
    doc = json.loads(baseline.read_text())
    ((kind, entry),) = doc["machines"].items()
    assert set(entry["methods"]) == {"ar", "ngram"} and "draft" in entry["skipped"]
    assert doc["method_overrides"] == {"ngram": ["method.max_n=3"]}
    ngram = entry["methods"]["ngram"]["units"]
    assert len(ngram) == 2 and all(len(u["repeats"]) == 2 for u in ngram.values())
    assert sum(u["new_tokens"] for u in ngram.values()) > sum(u["forwards"] for u in ngram.values())

    quick = ["--experiment", str(experiment), "--quick"]  # this tree vs the recorded entry
    assert gate.main(quick) == 0  # unchanged tree: passes
    out = capsys.readouterr().out
    assert "PASS" in out and "ngram" in out and "REGRESSION" not in out

    # planted: the config now drafts 1 token per round instead of 8, so τ drops
    assert gate.main([*quick, "k=1"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "FAIL: regression in ngram" in out

    # planted: a baseline demanding more τ, other tokens, and ×100 the AR cell's speedup
    for u in ngram.values():
        u["forwards"] -= 1
    first = next(iter(entry["outputs"]))
    entry["outputs"][first] = [0] * len(entry["outputs"][first])
    for u in entry["methods"]["ar"]["units"].values():
        u["log_ratio"] += math.log(100)
    baseline.write_text(json.dumps(doc))
    assert gate.main(quick) == 1
    out = capsys.readouterr().out
    assert "FAIL: regression in ar, ngram" in out
    assert out.count("REGRESSION") >= 4  # τ, tokens (both methods) and the AR cell's speedup


def many(factor: dict[str, float], seed: int = 1) -> tuple[dict, dict]:
    """A baseline and a run of six methods, each method's speedup now × factor[method] (× 1)."""
    names = ["ngram", "suffix", "sam", "draft", "eagle", "oracle"]
    base = {"outputs": IDS, "methods": {"ar": cell(1.0, forwards=3)}}
    run = {"ar": cell(1.0, forwards=3, seed=seed)}
    for i, m in enumerate(names):
        s = 1.2 + 0.1 * i
        base["methods"][m] = cell(s, forwards=2, seed=10 + i)
        run[m] = cell(s * factor.get(m, factor.get("*", 1.0)), forwards=2, seed=seed + 20 + i)
    return base, run


def test_a_drift_every_method_shares_is_not_one_methods_regression():
    # the CI run an hour after the recording on one Xeon: every method 5-8% slower, oracle too
    base, run = many({"*": 0.93, "oracle": 0.918, "ngram": 0.946})
    rows = compare(base, run, TOL)
    assert failed(rows) == [], [r.rule for r in rows if r.failed]
    common = [r for r in rows if r.method == "all"][0]
    assert common.verdict == "ok" and "median paired change of 6 methods -7" in common.rule
    assert "machine-wide" in [r for r in rows if r.method == "oracle"][-1].rule
    # one method 15% slower on top of that drift is still caught, and only that one
    base, run = many({"*": 0.93, "sam": 0.93 * 0.85})
    assert failed(compare(base, run, TOL)) == ["sam"]
    # everything 15% slower alike: the machine-wide row fails
    base, run = many({"*": 0.85})
    rows = compare(base, run, TOL)
    assert failed(rows) == ["all"]
    # without the separation the drift would have failed methods that did not change
    assert failed(compare(base, many({"*": 0.93})[1], Tolerances(common_tol=0.5))) == []
