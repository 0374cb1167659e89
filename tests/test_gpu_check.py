"""`python -m bench.gpu_check` on the CPU: every method on the tiny model built in-process, the
suite's own run per cell, and the report. (On CUDA the same command also runs SmolLM2's shape.)"""

from __future__ import annotations

import pandas as pd
import pytest

from bench import gpu_check

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only waits


def test_the_gpu_check_runs_every_method_on_the_cpu_and_passes(tmp_path):
    args = ["--device", "cpu", "--shapes", "tiny", "--tokens", "10", "--dist-samples", "100"]
    assert gpu_check.main([*args, "--out", str(tmp_path)]) == 0
    s = pd.read_csv(tmp_path / "summary.csv")
    assert set(s.method) == set(gpu_check.METHODS)
    assert len(s) == len(gpu_check.METHODS) + 2  # and the T = 1 distribution cells
    assert s.ok.all(), s[~s.ok].to_dict("records")
    greedy = s[s.temperature == 0]
    assert (greedy.mismatches == 0).all() and (greedy.exact == greedy.turns).all()
    tiny = greedy.set_index("method")
    assert (tiny.loc[list(gpu_check.ACCEPTING), "accepted_tokens"] > 0).all()
    sampled = s[s.temperature == 1]
    assert set(sampled.method) == {"draft", "eagle"} and (sampled.dist_pvalue >= 1e-3).all()
    assert (greedy.clock_gap < 0.5).all()  # one clock on the CPU: only the read's own time
    md = (tmp_path / "gpu_check.md").read_text()
    assert md.startswith("# GPU-path check on cpu") and "| tiny | float32 | eagle3 |" in md


def test_a_bad_choice_is_one_line_naming_the_valid_ones(tmp_path, capsys):
    assert gpu_check.main(["--shapes", "huge", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --shapes 'huge' is not valid; choose from smollm2, tiny"]
