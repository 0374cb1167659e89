"""The gate's power, simulated from the committed baseline's recorded unit ratios (1,000 seeded
draws per method, bench/gate/power.py): independent of this machine's load, and seconds long."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bench.gate import power
from bench.gate import run as gate
from bench.gate.rules import Tolerances

EXP = gate.load_experiment(gate.EXPERIMENT)
TOL = Tolerances.from_dict(EXP)
BASE = json.loads(EXP["baseline_path"].read_text())
CELLS = [(kind, m) for kind, entry in BASE.get("machines", {}).items() for m in entry["methods"]]


def test_the_gate_catches_the_drop_it_is_set_for():
    assert TOL.speedup_tol == 0.15 and CELLS


@pytest.mark.parametrize("kind,method", CELLS)
def test_a_15_percent_slowdown_is_caught_and_an_unchanged_tree_passes(kind, method):
    entry = BASE["machines"][kind]
    units, ar = entry["methods"][method]["units"], entry["methods"]["ar"]["units"]
    assert len(units) >= 16
    k = 0 if method == "ar" else power.methods_of(entry)  # the machine-wide part taken out
    assert power.rate(units, ar, TOL.speedup_tol, slowdown=0.15, methods=k) >= 0.90
    assert power.rate(units, ar, TOL.speedup_tol, slowdown=0.0, methods=k) <= 0.05


def fake_units(noise: float, n: int = 16, seed: int = 0) -> dict:
    e = np.random.default_rng(seed).normal(0, noise, (n, 2))
    return {
        f"u{i}": {"log_ratio": float(e[i].mean()), "repeats": list(map(float, e[i]))}
        for i in range(n)
    }


def test_the_simulation_sees_the_methods_own_noise():
    quiet, loud = fake_units(0.03), fake_units(0.4)
    assert power.rate(quiet, quiet, 0.15, 0.15) == 1.0 and power.rate(quiet, quiet, 0.15, 0) == 0
    # a method far noisier than the AR cell the threshold is set from raises false alarms
    assert power.rate(loud, quiet, 0.15, 0.0) > 0.05
    # the simulation draws the drop as a shift of the mean log ratio
    assert power.rate(quiet, quiet, 0.15, 0.5) == 1.0 and math.log(1 - 0.15) < 0
