"""Sweeps through real Hydra launchers (submitit's local executor, joblib), one device per job,
and a sweep killed by a real signal, then resumed by running the same command again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

# the checkout under test, whatever folder the command runs in
ENV = dict(
    os.environ,
    HF_HUB_OFFLINE="1",
    PYTHONWARNINGS="ignore",
    OMP_NUM_THREADS="1",
    PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
)


def tiny(target) -> list[str]:
    return [
        "model=hf",
        f"model.target={target}",
        "model.dtype=float32",
        "device=cpu",
        "device.threads=1",
        "task=code",
        "limit=2",
        "max_new_tokens=8",
        "repeats=1",
        "warmup=0",
        "remeasure=0",
    ]


def bench(args, cwd, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def summaries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*/summary.csv"))


@pytest.mark.parametrize(
    "launcher",
    [["hydra/launcher=submitit_local"], ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]],
    ids=["submitit_local", "joblib"],
)
def test_two_cells_through_a_launcher(launcher, tiny_target_dir, tmp_path):
    sweep = tmp_path / "sweep"
    p = bench(
        [
            "-m",
            *launcher,
            "method=ngram",
            "k=2,4",
            *tiny(tiny_target_dir),
            "device.allow_shared=true",
            f"hydra.sweep.dir={sweep}",
        ],
        tmp_path,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    found = summaries(sweep)
    assert len(found) == 2
    ks = sorted(int(pd.read_csv(f).k.iloc[0]) for f in found)
    assert ks == [2, 4]
    for f in found:  # each job measured its own interleaved baseline
        recs = [json.loads(x) for x in (f.parent / "records.jsonl").read_text().splitlines()]
        assert {r["role"] for r in recs} == {"baseline", "method"}
        assert json.loads((f.parent / "cell.json").read_text())["status"] == "complete"


def test_parallel_jobs_on_a_cpu_are_refused_unless_allowed(tiny_target_dir, tmp_path):
    p = bench(
        [
            "-m",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            "method=ngram",
            "k=2,4",
            *tiny(tiny_target_dir),
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        tmp_path,
    )
    assert p.returncode != 0
    assert "corrupt each other's timings" in p.stderr and "device.allow_shared=true" in p.stderr
    assert not summaries(tmp_path / "sweep")


PROMPTS = 16  # per cell: enough that the interrupt lands while the second cell runs


def test_a_killed_sweep_resumes_without_repeating_finished_work(tiny_target_dir, tmp_path):
    args = [
        "-m",
        "method=ngram",
        "k=2,3,4",
        *tiny(tiny_target_dir)[:-4],
        "max_new_tokens=64",
        "repeats=1",
        "warmup=0",
        "remeasure=0",
        f"limit={PROMPTS}",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", *args],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell without job control starts background commands with SIGINT ignored, and the
        # child would inherit that: give it the default, so Ctrl-C reaches it as from a terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 300
    first = None
    while time.time() < deadline and first is None:  # wait for the first cell to complete
        done = [
            c
            for c in tmp_path.glob("results/sweep_*/*/cell.json")
            if json.loads(c.read_text())["status"] == "complete"
        ]
        first = done[0].parent if done else None
        time.sleep(0.02)
    assert first is not None, "the first cell never completed"
    while time.time() < deadline:  # and the second one to finish a prompt
        second = [
            r
            for r in first.parent.glob("*/records.jsonl")
            if r.parent != first and r.stat().st_size
        ]
        if second:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # Ctrl-C while the second cell runs
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    sweep = first.parent
    before = {c.parent.name: json.loads(c.read_text()) for c in sweep.glob("*/cell.json")}
    assert before[first.name]["status"] == "complete"
    assert any(
        v["status"] == "partial" and v["prompts"][0] >= 1
        for k, v in before.items()
        if k != first.name
    ), before
    first_records = (first / "records.jsonl").read_text()
    p = bench(args, tmp_path)  # the same command again
    assert p.returncode == 0, p.stderr[-3000:]
    assert "complete, skipped" in p.stderr
    assert (first / "records.jsonl").read_text() == first_records  # not measured again
    after = {c.parent.name: json.loads(c.read_text()) for c in sweep.glob("*/cell.json")}
    assert len(after) == 3 and all(v["status"] == "complete" for v in after.values())
    for cell in sweep.glob("*/records.jsonl"):  # no prompt measured twice
        recs = [json.loads(x) for x in cell.read_text().splitlines()]
        keys = [(r["prompt_id"], r["role"], r["repeat"], r["turn"]) for r in recs]
        assert len(keys) == len(set(keys)) == PROMPTS * 2
    assert list(tmp_path.glob("results/sweep_*")) == [sweep]  # the same folder


def test_an_interrupted_run_summarises_what_it_finished(tiny_target_dir, tmp_path, monkeypatch):
    from conftest import compose

    from bench.run.runner import Runner, execute
    from groundfloor import provenance

    out = tmp_path / "run"
    cfg = compose(["method=ngram", *tiny(tiny_target_dir), "limit=3", f"out={out}"])
    real, calls = Runner.measure, []

    def measure(self, prompt):
        calls.append(prompt.id)
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C during the third prompt
        return real(self, prompt)

    monkeypatch.setattr(Runner, "measure", measure)
    summary, _, _ = execute(cfg, out)
    assert bool(summary.partial.iloc[0]) and summary.n_prompts.iloc[0] == 2
    state = json.loads((out / "cell.json").read_text())
    assert (state["status"], state["prompts"]) == ("partial", [2, 3])
    assert state["code"] == provenance.code_state()  # what a resume is checked against
    monkeypatch.setattr(Runner, "measure", real)
    summary, _, runner = execute(cfg, out)  # resumed: only the third prompt is measured
    assert not bool(summary.partial.iloc[0]) and summary.n_prompts.iloc[0] == 3
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 3 * 2
    other = compose(["method=ngram", *tiny(tiny_target_dir), "limit=2", f"out={out}"])
    from groundfloor.errors import UserError

    with pytest.raises(UserError, match="holds the results of another configuration"):
        execute(other, out)


@pytest.mark.parametrize("launcher", [["hydra/launcher=submitit_local"], ["hydra/launcher=joblib"]])
def test_a_parallel_launcher_on_a_cpu_is_refused_before_any_job(launcher, tmp_path):
    """One line and exit 2 before a job starts (no submitit or joblib traceback), naming the
    switch that would accept it."""
    p = bench(
        [
            "-m",
            *launcher,
            "method=ngram",
            "k=2,4",
            "device=cpu",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        tmp_path,
    )
    assert p.returncode == 2
    lines = [x for x in p.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "corrupt each other's timings" in lines[0], p.stderr[-2000:]
    assert "device.allow_shared=true" in lines[0]
    assert not (tmp_path / "sweep").exists()
