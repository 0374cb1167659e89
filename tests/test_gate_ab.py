"""The A/B gate: its speed rule on hand-made trees (bench/gate/paired.py), the trio order, and end
to end with real workers on a tiny model in a throwaway git repository (one recorded commit for
the module): A against a second checkout of itself holds every deterministic row, and a row too
noisy to judge is topped up and says so in the verdict's first line and JSON; the planted
slowdown fails every tokens/s row; a tree under test that cannot build a method, adds one,
loosens its own experiment or leaves a committed unit out is judged by the recorded experiment
and fails where it must; an old worker or a commit without one is refused in one line."""

from __future__ import annotations

import dataclasses
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

from bench.gate import confirm, paired
from bench.gate.rules import Row
from bench.gate.trios import Order
from bench.gate.verdict import headline
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

    # B as far from A as A′ is (every method alike: a process offset, the median of the rows'
    # E) does not fail, though the floor alone (−7.8%) would: over ten runs, at most one of the
    # 40 tokens/s rows (each at the Bonferroni z: ~0.5% a row)
    def run(seed: int) -> dict:  # a gate run: A, and B and A′ each 10% slower
        three = (tree({}, 0.03, 3 * seed + i, offset=1.0 if i == 0 else 0.9) for i in range(3))
        return dict(zip(("A", "B", "A′"), three, strict=True))

    fails = [failed(paired.speed_rows(run(seed), 0.15)) for seed in range(1, 11)]
    assert sum(map(len, fails)) <= 1, fails
    # the same B against an A′ of no offset fails every tokens/s row
    t["A′"] = tree({}, 0.03, 2)
    rows = paired.speed_rows({**t, "B": tree({}, 0.03, 3, offset=0.9)}, 0.15)
    assert {m for m, metric in failed(rows) if metric == "tokens_per_s"} == set(METHODS)


def test_units_slow_in_a_row_widen_the_threshold_and_forwards_are_reported_not_counted():
    """k=auto carries its state from unit to unit: five units in a row 12% slower (a tree drafter
    that stopped drafting for a while) are less evidence than the same five scattered, so the SE
    is the larger of the independent and the autocorrelation-robust one; where A′ made 20% fewer
    forwards than A the row says so, and a B 15% slower in eagle still fails."""
    rng = np.random.default_rng(0)
    e = rng.normal(0, 0.02, N)
    e[6:11] -= 0.12
    scattered = e[[0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11, 12, 13, 14, 15, 16]]
    assert paired.unit_se(e) > 1.3 * paired.unit_se(scattered)
    assert paired.unit_se(scattered) >= float(scattered.std(ddof=1) / math.sqrt(N))
    assert paired.lag(17) == 3 and paired.lag(8) == 2 and paired.lag(2) == 1

    def with_forwards(t: dict, a: int, a2: int) -> dict:
        for k, n in (("A", a), ("B", a), ("A′", a2)):
            for f in t[k]["eagle"].values():
                f["forwards"] = n
        return t

    rows = paired.speed_rows(with_forwards(trees({"eagle": 0.85}), 50, 40), 0.15)
    row = next(r for r in rows if (r.method, r.metric) == ("eagle", "tokens_per_s"))
    assert "forwards A′/A -20.0% B/A +0.0%" in row.rule and row.failed, row.rule
    rows = paired.speed_rows(with_forwards(trees({}), 50, 40), 0.15)
    assert failed(rows) == []


def test_units_are_judged_in_the_order_a_measured_them():
    t = trees({})
    units = list(t["A"]["eagle"])
    t["A"]["eagle"] = {u: t["A"]["eagle"][u] for u in reversed(units)}
    assert paired.noise_units(t, "eagle", "tokens_per_s") == units[::-1]


def test_every_method_slower_alike_fails_the_machine_wide_row_where_single_rows_cannot():
    """Rows too noisy to judge one by one (noise 0.12 a unit): the median of every method's
    B/A still catches all of them 15% slower, and passes an unchanged tree."""
    loud = trees({m: 0.85 for m in METHODS}, noise=0.12, seed=4)
    row = paired.machine_row(loud, 0.15, 8)
    assert row is not None and row.failed, row.rule
    assert not paired.machine_row(trees({}, noise=0.03, seed=4), 0.15, 8).failed
    assert paired.machine_row({k: {"ar": v["ar"]} for k, v in trees({}).items()}, 0.15, 2) is None


def test_a_failed_speed_row_is_judged_again_and_a_failed_tokens_row_is_not():
    rows = [
        Row("eagle@b4", "speedup", 0.96, 0.8, "B/A -17.3% ≥ -11.2% (8 units)", "REGRESSION"),
        Row("ngram", "tokens_per_s", 100.0, 80.0, "B/A -20.0% ≥ -7.8% (17 units)", "REGRESSION"),
        Row("suffix", "tokens_per_s", 100.0, 99.0, "B/A -1.0% ≥ -7.8% (17 units)", "ok"),
    ]
    ready = {"cells": [{"name": c, "kind": k} for c, k in (
        ("ar", "speed"), ("ngram", "speed"), ("suffix", "speed"), ("ngram@fixed", "fixed"),
        ("ar@b4", "batch"), ("eagle@b4", "batch"))]}  # fmt: skip
    # each with its ar at the same batch (its speedup row); the machine-wide row every speed cell
    assert confirm.cells_to_confirm(rows, ready) == {"eagle@b4", "ar@b4", "ngram", "ar"}
    every = Row("all", "tokens_per_s", None, 0.85, "median B/A", "REGRESSION")
    assert confirm.cells_to_confirm([every], ready) == {"ar", "ngram", "suffix"}
    # a failed tokens row fails the gate as it stands: nothing to confirm
    tokens = Row("ngram", "tokens", 1.0, 0.9, "ids", "REGRESSION")
    assert confirm.cells_to_confirm([*rows, tokens], ready) is None
    assert confirm.cells_to_confirm(rows[2:], ready) is None
    again = [
        Row("eagle@b4", "speedup", 0.96, 0.95, "B/A -1.0% ≥ -11.0% (8 units)", "ok"),
        Row("ngram", "tokens_per_s", 100.0, 81.0, "B/A -19.0% ≥ -7.8% (17 units)", "REGRESSION"),
    ]
    judged = {(r.method, r.metric): r for r in confirm.judge(rows, again)}
    held = judged[("eagle@b4", "speedup")]
    assert held.verdict == "unconfirmed" and not held.failed
    assert held.rule.endswith("; fresh trio: B/A -1.0% ≥ -11.0% ok"), held.rule
    assert judged[("ngram", "tokens_per_s")].verdict == "REGRESSION"
    assert judged[("suffix", "tokens_per_s")] == rows[2]
    code, line = headline(confirm.judge(rows[:1], again), [])
    assert (code, line) == (0, "PASS, but not confirmed in fresh processes: eagle@b4 speedup")
    # a fresh trio too noisy to judge does not clear a failure
    noisy = [dataclasses.replace(again[0], verdict="underpowered")]
    assert confirm.judge(rows[:1], noisy)[0].verdict == "REGRESSION"


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


def test_a_distribution_row_fails_below_alpha_or_below_the_drafting_floor():
    """B's seeded check judges: p ≥ alpha past the floor passes; a p under alpha, or a method
    that drafted under the floor (untested: nothing was checked), fails; A's p is shown."""
    from bench.gate.abrows import Measured, dist_rows

    cells = [{"name": "eagle@t1", "kind": "dist", "method": "eagle"}]
    ready = {k: {"cells": cells} for k in ("A", "B")}

    def row(b: dict):
        a = {"pvalue": 0.4, "status": "tested", "drafted": 300, "floor": 100}
        (r,) = dist_rows(
            Measured(ready, {}, {}, True, None, {"A": {"eagle@t1": a}, "B": {"eagle@t1": b}}, 0.001)
        )
        assert r.metric == "distribution" and r.baseline == 0.4
        return r

    assert row({"pvalue": 0.02, "status": "tested", "drafted": 300, "floor": 100}).verdict == "ok"
    low = row({"pvalue": 0.0004, "status": "tested", "drafted": 300, "floor": 100})
    assert low.verdict == "REGRESSION" and low.failed
    none = row({"pvalue": None, "status": "untested", "drafted": 12, "floor": 100})
    assert none.verdict == "REGRESSION" and "12 tokens < the floor 100" in none.rule


def test_no_tree_runs_twice_in_a_row_and_each_takes_every_position():
    order, seq = Order(), []
    trios = [order.next(("A", "B", "A′")) for _ in range(6)]
    for trio in trios:
        seq += trio
    assert all(a != b for a, b in zip(seq, seq[1:], strict=False)), seq
    for tree in ("A", "B", "A′"):  # over three trios, each tree once in each position
        assert sorted(t.index(tree) for t in trios[:3]) == [0, 1, 2]
    pairs = [order.next(("A", "B")) for _ in range(4)]  # pairs after trios: still no repeat
    seq = [*trios[-1], *[k for p in pairs for k in p]]
    assert all(a != b for a, b in zip(seq, seq[1:], strict=False)), seq


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


def gate(repo, *args):
    return subprocess.run(
        [sys.executable, "-m", "bench.gate", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
        timeout=600,
    )


def copy_repo(dest):
    """This checkout's code (no artifacts) committed in a new repository."""
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


EXP = "conf/experiment/tiny_gate.yaml"
# two methods, two prompts of one turn, 8 tokens, batch rows at batch=2 over two groups: real
# workers, few units (every method but ar and ngram skipped from `all`, so that a method a tree
# adds to conf/method/ is gated as new)
OTHERS = ["draft", "eagle", "eagle3", "hf_ar", "hf_assisted", "hf_pld", "lookahead"]
OTHERS += ["medusa", "oracle", "recycling", "sam", "suffix"]


# the 16-bit target's cells (conf/experiment/gate.yaml's rows.w16) on the tiny model
W16 = {
    "methods": ["ar", "ngram"],
    "overrides": ["model.weights=bfloat16", "model.kernel=native_bf16"],
}


def tiny_experiment(target, **more) -> dict:
    return {
        "overrides": [
            "model=hf",
            f"model.target={target}",
            "model.dtype=float32",
            "device=cpu",
            "task=code",
            "limit=2",
            "max_new_tokens=8",
            "repeats=1",
            "warmup=1",
            "temperature=0",
            "device.threads=1",
        ],
        "methods": "all",
        "skip_methods": OTHERS,
        "rows": {
            "batch": {"methods": ["ar", "ngram"], "batch": 2, "runs": 2},
            "dist": {"methods": ["ngram"], "alpha": 0.001},
        },
        "baseline": "tiny_baseline.json",
        "record_repeats": 2,
        # tiny-model timings beside other work are noisy: the floor is at −68%; the planted
        # slowdown makes every turn 21× slower
        "speedup_tol": 0.9,
        "topup_s": 0,
        **more,
    }


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, tiny_target_dir):
    """A repository whose HEAD has the tiny experiment, and the baseline recorded there."""
    repo = copy_repo(tmp_path_factory.mktemp("ab") / "repo")
    (repo / EXP).write_text(yaml.safe_dump(tiny_experiment(tiny_target_dir)))
    git("add", EXP, cwd=repo)
    git("commit", "-q", "-m", "tiny gate", cwd=repo)
    got = gate(repo, "--experiment", EXP, "--update")
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-3000:]
    head = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    assert json.loads((repo / "conf/experiment/tiny_baseline.json").read_text())["commit"] == head
    return repo, head


def variant(repo, path, **changes):
    """The recorded tiny experiment with `changes`, written to `path` (outside the repository:
    it judges both trees), its baseline the recorded one."""
    exp = yaml.safe_load((repo / EXP).read_text())
    base = (repo / "conf/experiment/tiny_baseline.json").resolve()
    path.write_text(yaml.safe_dump({**exp, **changes, "baseline": str(base)}))
    return path


def rows_of(doc) -> dict:
    return {(r["method"], r["metric"]): r for r in doc["rows"]}


@pytest.mark.slow
def test_the_planted_slowdown_fails_every_tokens_per_s_row(recorded, tmp_path):
    repo, _ = recorded
    slow = gate(repo, "--experiment", EXP, "--plant-slowdown", "20", "--out", str(tmp_path))
    assert slow.returncode == 1, slow.stdout[-3000:] + slow.stderr[-3000:]
    assert slow.stdout.splitlines()[0].startswith("FAIL: regression in ar, ar@b2, ngram, ngram@b2")
    (verdict,) = tmp_path.glob("*/verdict.json")
    doc = json.loads(verdict.read_text())
    rows = rows_of(doc)
    tps = {m for (m, metric), r in rows.items() if metric == "tokens_per_s"}
    assert tps == {"ar", "ngram", "ar@b2", "ngram@b2"}
    assert all(rows[m, "tokens_per_s"]["verdict"] == "REGRESSION" for m in tps)
    # the same ids: only the speed failed; every method alike, so the speedups hold
    assert rows[("ngram", "tokens")]["verdict"] == "ok"
    assert rows[("ngram", "speedup")]["verdict"] in ("ok", "better")
    # a fresh trio measured the failed rows again: the planted B is slower there too
    assert "fresh trio: B/A -9" in rows[("ar", "tokens_per_s")]["rule"]
    assert any(n.startswith("confirmation: 4 cells measured again") for n in doc["notes"])


@pytest.mark.slow
def test_one_slow_b_process_is_not_a_regression(recorded, tmp_path):
    """Only the first B process planted (an unlucky process, not a slower tree): every tokens/s
    row fails the first pass, holds in the fresh pair, and the gate passes naming them (speed
    rows only, for time: the recorded experiment without its batch and T = 1 rows)."""
    repo, _ = recorded
    lean = variant(repo, tmp_path / "lean.yaml", rows={})
    args = ("--plant-slowdown", "20", "--plant-once", "--json", str(tmp_path / "v.json"))
    got = gate(repo, "--experiment", str(lean), *args)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["line"].startswith("PASS, but not confirmed in fresh processes: ar tokens_per_s")
    assert set(doc["unconfirmed"]) == {"ar tokens_per_s", "ngram tokens_per_s"}
    assert any(n.startswith("planted in the first B process only") for n in doc["notes"])


@pytest.mark.slow
def test_the_recorded_experiment_judges_a_tree_that_breaks_adds_and_drops(recorded, tmp_path):
    repo, _ = recorded
    work = tmp_path / "b"
    git("worktree", "add", "-q", "--detach", str(work), "HEAD", cwd=repo)
    shutil.copy2(repo / "conf/experiment/tiny_baseline.json", work / "conf/experiment")
    # B cannot build ngram (a broken knob), adds ngram2, and loosens its own experiment
    ngram = work / "conf/method/ngram.yaml"
    (work / "conf/method/ngram2.yaml").write_text(
        ngram.read_text().replace("name: ngram", "name: ngram2")
    )
    ngram.write_text(ngram.read_text().replace("fixed_k: 8 ", "fixed_k: 0 "))
    loose = yaml.safe_load((work / EXP).read_text())
    (work / EXP).write_text(yaml.safe_dump({**loose, "speedup_tol": 0.99, "tau_tol": 0.5}))
    # and the baseline commits a unit that no tree measures
    base = json.loads((work / "conf/experiment/tiny_baseline.json").read_text())
    for entry in base["machines"].values():
        entry["outputs"]["ghost/0"] = [1, 2, 3]
    (work / "conf/experiment/tiny_baseline.json").write_text(json.dumps(base))
    got = gate(work, "--experiment", EXP, "--json", str(tmp_path / "v.json"))
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-3000:]
    doc = json.loads((tmp_path / "v.json").read_text())
    rows = rows_of(doc)
    assert "ngram" in doc["failed"] and "all" in doc["failed"]
    for cell in ("ngram", "ngram@fixed", "ngram@b2"):
        row = rows[(cell, "build")]
        assert row["verdict"] == "FAIL" and "fixed_k=0 is not valid for ngram" in row["rule"]
    assert rows[("ngram2", "tokens_per_s")]["verdict"] == "new"
    assert rows[("ngram2", "tokens_per_s")]["now"] > 0  # measured at B
    assert "ngram2" not in doc["failed"]
    assert rows[("all", "units")]["verdict"] == "REGRESSION"
    assert "ghost/0" in rows[("all", "units")]["rule"]
    assert any(
        "speedup_tol: recorded 0.9, B's own 0.99" in d for d in doc["experiment_differences"]
    )
    assert "−90%" in rows[("ar", "tokens_per_s")]["rule"]  # the recorded tolerance judged
    git("worktree", "remove", "--force", str(work), cwd=repo)


@pytest.mark.slow
def test_a_against_itself_is_judged_and_a_row_too_noisy_is_topped_up(recorded, tmp_path):
    """A against a second checkout of itself: every deterministic row holds. Asked to catch a 1%
    slowdown, which a tiny model's timings over two units cannot tell from noise, the speed rows
    stay underpowered through the top-up, and the verdict says so in its first line and JSON."""
    repo, head = recorded
    rows = {**tiny_experiment("x")["rows"], "w16": W16}  # and the 16-bit target's cells
    noisy = variant(repo, tmp_path / "noisy.yaml", speedup_tol=0.01, topup_s=3, rows=rows)
    got = gate(repo, "--experiment", str(noisy), "--self", "--json", str(tmp_path / "v.json"))
    first = got.stdout.splitlines()[0] if got.stdout else ""
    assert "underpowered" in first, got.stdout[-3000:] + got.stderr[-3000:]
    assert got.returncode == (0 if first.startswith("PASS") else 1)
    assert f"A = {head[:12]} (recorded), B = {head} (a second checkout of A)" in got.stdout
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["underpowered"] and doc["line"] == first and doc["self"]
    assert any(n.startswith("top-up: ") for n in doc["notes"]), doc["notes"]
    assert doc["topup_seconds"] >= 3 and doc["experiment_differences"] == []
    rows = rows_of(doc)
    for key in [("ar", "tokens"), ("ngram", "tau"), ("ar", "tokens_vs_A"), ("all", "units")]:
        assert rows[key]["verdict"] == "ok", rows[key]
    assert rows[("ngram@b2", "tokens_vs_A")]["verdict"] == "ok"
    assert rows[("ngram@b2", "exact_match")]["verdict"] == "ok"
    # every kind of row is there: speed at the default k, batch runs (one unit per batch run),
    # the seeded T = 1 distribution check on B (drafting forced past its floor)
    assert "2 units" in rows[("ngram@b2", "tokens_per_s")]["rule"]
    dist = rows[("ngram@t1", "distribution")]
    assert dist["verdict"] == "ok" and dist["now"] >= 0.001 and dist["baseline"] is None
    assert {("ar", "tokens_per_s"), ("ngram", "speedup")} <= rows.keys()
    # the 16-bit target: in trios, each unit's ids equal ar@w16's and A's
    for key in [
        ("ngram@w16", "exact_match"),
        ("ngram@w16", "tokens_vs_A"),
        ("ar@w16", "tokens_vs_A"),
    ]:
        assert rows[key]["verdict"] == "ok", rows[key]
    assert {("ngram@w16", "tokens_per_s"), ("ngram@w16", "speedup")} <= rows.keys()


@pytest.mark.slow
def test_an_old_worker_or_none_is_refused_in_one_line(recorded):
    repo, head = recorded
    worker = repo / "bench" / "gate" / "worker.py"
    text = worker.read_text()
    doc_path = repo / "conf/experiment/tiny_baseline.json"
    saved = doc_path.read_text()
    try:
        for change, says in (
            (
                text.replace("PROTOCOL = 2", "PROTOCOL = 1"),
                "speaks protocol 1, this gate 2: re-record the baseline",
            ),
            (None, "has no gate worker"),
        ):
            if change is None:
                worker.unlink()
            else:
                worker.write_text(change)
            git("commit", "-q", "-am", "another worker", cwd=repo)
            doc = json.loads(saved)
            doc["commit"] = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
            doc_path.write_text(json.dumps(doc))
            git("checkout", "-q", head, "--", "bench/gate/worker.py", cwd=repo)  # B: this gate
            refused = gate(repo, "--experiment", EXP)
            assert refused.returncode == 2 and says in refused.stderr, refused.stderr[-2000:]
            assert len(refused.stderr.strip().splitlines()) == 1
    finally:
        git("reset", "-q", "--hard", head, cwd=repo)
        doc_path.write_text(saved)
