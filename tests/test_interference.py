"""Interference: a real CPU hog during part of a run is noticed, re-measured and flagged.

The hog is one busy subprocess per core, running during the first repeat pair of one prompt
only. The run must see it in its load probe, flag that prompt's unit, give it extra pairs and
leave the hogged pair out of the unit's speedup. Whether the extra pairs come out quiet depends
on the machine after the hog stops (a shared CI machine may stay noisy), so the test checks that
the run's verdicts follow the rules from what it recorded, not that the machine became quiet:
how much a hog moves a cell's speedup is a benchmark's question, not a test's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager

import pandas as pd
import pytest
from conftest import compose

from bench.outputs.metrics import unit_speed
from bench.run import interference
from bench.run.runner import Runner, execute
from groundfloor import load, machine

HOGGED = 2  # the prompt (by position) whose first pair runs beside the hog
REMEASURE = 3


@contextmanager
def hogs():
    """One busy subprocess per core while the block runs."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    time.sleep(0.3)  # let them take the cores
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def machine_busy(seconds: float = 1.0) -> float:
    probe = load.LoadProbe()
    probe.start()
    time.sleep(seconds)
    return probe.stop()["others_cpu"] or 0.0


def run_with_hog(tiny_target_dir, out):
    cfg = compose(
        [
            "method=ngram",
            "model=hf",
            f"model.target={tiny_target_dir}",
            "model.dtype=float32",
            "device=cpu",
            "device.threads=1",
            "task=code",
            "limit=5",
            "max_new_tokens=64",
            "repeats=2",
            "warmup=1",
            f"remeasure={REMEASURE}",
            f"out={out}",
        ]
    )
    real_pair = Runner.pair
    seen = []

    def pair(self, prompt, runs, r):
        if prompt.id not in seen:
            seen.append(prompt.id)
        if len(seen) - 1 == HOGGED and r == 0:
            with hogs():
                return real_pair(self, prompt, runs, r)
        return real_pair(self, prompt, runs, r)

    Runner.pair = pair
    try:
        return execute(cfg, out)[0].iloc[0], seen[HOGGED]
    finally:
        Runner.pair = real_pair


def test_a_cpu_hog_is_flagged_remeasured_and_left_out(tiny_target_dir, tmp_path):
    busy = machine_busy()
    if busy > 0.1:
        pytest.skip(
            f"other work already uses {busy:.0%} of this machine: the hog would not stand out"
        )
    summary, pid = run_with_hog(tiny_target_dir, tmp_path)
    recs = pd.read_json(tmp_path / "records.jsonl", lines=True)
    assert (recs.turn == 0).all()  # one turn per prompt: a unit is a prompt
    unit = recs[recs.prompt_id == pid]
    first = unit[unit.repeat == 0]
    # the load probe saw the hog, so the hogged repeats are not quiet and the unit is disturbed
    assert (first.others_cpu > 0.25).all()
    assert not first.quiet.any()
    assert unit.unit_disturbed.all()
    # re-measured: extra pairs were run and recorded, as many as the unit's verdicts called for
    n_extra = int(unit.remeasured.iloc[0])
    assert 1 <= n_extra <= REMEASURE and (unit.remeasured == n_extra).all()
    assert sorted(unit[unit.role == "method"].repeat) == list(range(2 + n_extra))
    assert unit[unit.repeat >= 2].extra_round.all() and not unit[unit.repeat < 2].extra_round.any()
    # clean means two pairs with both sides quiet; the run stops re-measuring once clean, and
    # only gives up after its last allowed round
    by_side = unit.pivot_table(index="repeat", columns="role", values="quiet", aggfunc="first")
    both = by_side.baseline.astype(bool) & by_side.method.astype(bool)
    assert not both.iloc[0]
    assert unit.unit_clean.all() == (both.sum() >= 2)
    if unit.unit_clean.all():
        assert both.iloc[:-1].sum() < 2  # the last extra pair was the one that made it clean
    else:
        assert n_extra == REMEASURE
    # the summary counts it, and (when quiet pairs exist) its speedup leaves the hogged pair out
    assert summary.disturbed_units >= 1 and summary.remeasured >= 1
    assert summary.unclean_units == int(
        (~recs[recs.repeat == 0].groupby("prompt_id").unit_clean.first().astype(bool)).sum()
    )
    m, b = recs[recs.role == "method"], recs[recs.role == "baseline"]
    got = unit_speed(m, b).set_index("prompt_id").ratio[pid]

    def speed(side):
        one = side[side.prompt_id == pid].set_index("repeat")
        return one.new_tokens / one.wall_s

    ratios = speed(m) / speed(b)
    if both.any():
        assert got == pytest.approx(ratios[both[both].index].median())
    else:
        assert got == pytest.approx(ratios.median())


def test_judge_flags_disagreeing_repeats_and_interference():
    class Res:
        def __init__(self, wall, n=10):
            self.times_ns = {"wall": int(wall * 1e9), "ttft": int(0.1e9)}
            self.output_ids = [0] * n

    rules, band = interference.Rules(1.25, 0.25), interference.Band()
    calm = {"others_cpu": 0.0, "steal": 0.0}
    ok = {
        "baseline": [(Res(1.0), calm), (Res(1.1), calm)],
        "method": [(Res(0.5), calm), (Res(0.52), calm)],
    }
    disturbed, quiet = interference.judge(ok, rules, band)
    assert not disturbed and interference.quiet_pairs(quiet) == [0, 1]
    slow = {"baseline": [(Res(1.0), calm), (Res(1.6), calm)], "method": ok["method"]}
    disturbed, quiet = interference.judge(slow, rules, band)
    assert disturbed and interference.quiet_pairs(quiet) == [0]
    busy = {
        "baseline": ok["baseline"],
        "method": [(Res(0.5), calm), (Res(0.5), {"others_cpu": 0.9})],
    }
    disturbed, quiet = interference.judge(busy, rules, band)
    assert disturbed and quiet["method"] == [True, False]


def test_timed_choices_under_a_hog_are_loaded_again_and_flagged(tiny_target_dir, capsys):
    """model.kernel=auto times torch's and oneDNN's products while the engine loads: a load
    beside a hog is done again and, still hogged, flagged with a warning; a load whose choices
    were all asked for times nothing and has nothing to flag."""
    from bench.run.lifecycle import load_watched

    rules = interference.Rules(1.25, 0.25)
    asked = dict(engine="lean", weights="float32", dtype="float32", compile=False)
    with hogs():  # the pinned load first: the timed one after it shows the hogs were running
        _, pinned = load_watched(str(tiny_target_dir), "cpu", {**asked, "kernel": "aten"}, rules)
        _, auto = load_watched(str(tiny_target_dir), "cpu", {**asked, "kernel": "auto"}, rules)
    assert "seconds" in auto["kernel_probe"]  # it did time the kernels
    assert auto["probe_load"]["others_cpu"] > 0.25
    assert auto["probe_loads"] == 2 and auto["probes_disturbed"]
    assert "may not be what a quiet machine picks" in capsys.readouterr().err
    # a load of milliseconds is below /proc/stat's resolution, so its own reading may be 0
    assert set(pinned["probe_load"]) >= {"others_cpu", "steal"}
    assert pinned["probe_loads"] == 1 and not pinned["probes_disturbed"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin one")
def test_a_hog_on_the_jobs_own_cpu_reads_as_its_whole_capacity():
    """A job limited to one CPU of a larger machine: a hog on that CPU takes the job's whole
    capacity, not 1/n of the host."""
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.3)
        probe = load.LoadProbe()
        assert probe.cpus == [cpu] and probe.capacity == 1
        probe.start()
        time.sleep(1.0)
        seen = probe.stop()["others_cpu"]
    finally:
        os.sched_setaffinity(0, mine)
        hog.kill()
        hog.wait()
    assert seen > 0.75, seen  # host-wide, it read about 1 / cpu_count


def fake_cgroup(root, quota: str, usage_usec: int):
    root.mkdir(exist_ok=True)
    (root / "cpu.max").write_text(quota)
    (root / "cpu.stat").write_text(f"usage_usec {usage_usec}\nuser_usec 0\n")
    return root


def test_the_capacity_is_the_cgroup_quota_when_it_is_smaller(tmp_path):
    n = len(os.sched_getaffinity(0))
    assert machine.cgroup_quota(fake_cgroup(tmp_path, "max 100000", 0)) is None
    assert machine.job_cpus(tmp_path)[1] == n
    assert machine.cgroup_quota(fake_cgroup(tmp_path, "50000 100000", 0)) == 0.5
    assert machine.job_cpus(tmp_path)[1] == 0.5
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("150000")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert machine.cgroup_quota(v1) == 1.5
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert machine.cgroup_quota(v1) is None


def test_others_inside_a_quota_limited_cgroup_count_against_the_quota(tmp_path):
    """Under a quota of half a CPU, a second process of the job's cgroup using half a CPU for
    the whole turn takes all of it."""
    root = fake_cgroup(tmp_path, "50000 100000", 0)
    probe = load.LoadProbe(root)
    probe.start()
    time.sleep(0.5)
    dt = time.monotonic() - probe.t0
    fake_cgroup(root, "50000 100000", int(dt * 0.5 * 1e6))  # others: 0.5 CPU for dt
    assert probe.stop()["others_cpu"] >= 0.9


def test_another_process_on_the_gpu_is_interference():
    rules = interference.Rules()
    quiet = {"others_cpu": 0.0, "steal": 0.0}
    assert not interference.interfered(quiet, rules)
    assert interference.interfered({**quiet, "gpu_others": 1}, rules)
    assert load.gpu_handle(None) is None and load.LoadProbe().gpu is None
