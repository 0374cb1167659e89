"""The gate's planted slowdown (bench/gate/plant.py) is inside the clock: a turn's measured wall
grows by the fraction of its own wall, whatever the turn did. A batch run's plant is checked end
to end (tests/test_gate_ab.py: every batch row's tokens/s fails with the planted slowdown)."""

from __future__ import annotations

import time

import torch

from bench.gate.plant import PlantedClock
from groundfloor.clock import Clock


def timed_turn(clock, seconds: float) -> dict:
    clock.reset()
    with clock.phase("prefill"):
        time.sleep(seconds / 2)
    with clock.phase("verify"):
        time.sleep(seconds / 2)
    return clock.read()


def test_the_planted_clock_lengthens_each_turn_by_its_own_share():
    for seconds in (0.02, 0.06):
        plain = Clock(torch.device("cpu"))
        times = timed_turn(plain, seconds)
        assert times["wall"] >= seconds * 1e9
        planted = PlantedClock(torch.device("cpu"), 0.5)
        t = timed_turn(planted, seconds)
        work = t["prefill"] + t["verify"]
        # the sleep is a span of the clock: the wall holds the work and half of it again
        assert t["wall"] >= 1.5 * work and t["wall"] < 1.5 * work + 0.02e9, (t, work)
        assert t["other"] >= 0.5 * work and t["host_wall"] >= t["wall"]
    assert PlantedClock(torch.device("cpu"), 0.5).read()["wall"] == 0  # no turn: nothing slept
