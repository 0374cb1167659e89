"""`python -m bench.tools.gpu_check` on the CPU: every method on the tiny model built in-process,
the suite's own run per cell, and the report. (On CUDA the same command also runs SmolLM2's
shape.)"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.tools import gpu_check

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only waits


@pytest.mark.serial  # its two clocks agree within a turn of a few ms only if nothing preempts it
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


SMALL = ["--device", "cpu", "--methods", "ngram", "--tokens", "4", "--dist-samples", "20"]


def test_a_check_measures_afresh_and_resumes_only_when_asked(tmp_path, capsys):
    """Run twice, the second measures anew (a cell folder of its own, nothing skipped); with
    --resume the last check's cells are read back, none measured again."""
    out = ["--out", str(tmp_path)]
    assert gpu_check.main([*SMALL, *out]) != 2
    assert gpu_check.main([*SMALL, *out]) != 2
    assert "complete, skipped" not in capsys.readouterr().err
    first, second = sorted(p.parent for p in tmp_path.glob("cells/*/check.json"))
    assert {p.name for p in first.iterdir()} == {p.name for p in second.iterdir()}
    records = second / "tiny-float32-ngram" / "records.jsonl"
    before = records.read_text()
    assert gpu_check.main([*SMALL, *out, "--resume"]) != 2
    err = capsys.readouterr().err
    assert f"resuming the cells in {second}" in err
    assert err.count("complete, skipped: ") == 3 and str(first) not in err
    assert records.read_text() == before
    assert len(list(tmp_path.glob("cells/*/check.json"))) == 2
    assert f"cells in {second} (resumed)" in (tmp_path / "gpu_check.md").read_text()


def test_resume_is_refused_for_other_code_or_settings_and_keeps_the_cells(
    tmp_path, capsys, monkeypatch
):
    from groundfloor import provenance

    cells = tmp_path / "cells" / "2020-01-01_00-00-00"
    cells.mkdir(parents=True)
    settings = {"--device": "cpu", "--tokens": 4, "--peak": 10.0, "--dist-samples": 20}
    code = {"commit": "a" * 40, "modified": [], "diff": None}
    record = json.dumps({"code": code, "settings": settings})
    (cells / "check.json").write_text(record)
    other = {"commit": "b" * 40, "modified": ["bench/decode/loop.py"], "diff": "0123456789abcdef"}
    monkeypatch.setattr(provenance, "code_state", lambda: other)
    args = [*SMALL, "--out", str(tmp_path), "--resume"]
    assert gpu_check.main([*args, "--tokens", "6"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: cells in {cells} were measured at commit aaaaaaaaaaaa (clean), this tree is "
        "bbbbbbbbbbbb (modified: bench/decode/loop.py); and were measured with other settings "
        "(--tokens 4 → 6); they are left as they are: run without resume=true (--resume) to "
        "measure afresh"
    ]
    monkeypatch.setattr(provenance, "code_state", lambda: code)
    assert gpu_check.main([*args, "--tokens", "6"]) == 2  # the same code: the settings alone
    err = capsys.readouterr().err
    assert "measured at commit" not in err
    assert "were measured with other settings (--tokens 4 → 6)" in err
    assert (cells / "check.json").read_text() == record  # nothing measured, nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cells"]
    assert [p.name for p in cells.iterdir()] == ["check.json"]


def test_an_out_that_cannot_be_written_is_one_line(capsys):
    assert gpu_check.main(["--device", "cpu", "--out", "/proc/x"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: --out='/proc/x' cannot be created or written: No such file or directory"]
