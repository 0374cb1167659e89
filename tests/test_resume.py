"""Resuming a run directory (bench.lifecycle.open_cell): what continues, what is refused, and an
out= that cannot be written; a refusal is one line, before the engine loads, the files kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, compose

from bench import cells, lifecycle
from bench.runner import Runner, execute
from groundfloor.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only waits

ENV = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")


def tiny(target) -> list[str]:
    return [
        "method=ngram",
        "k=2",
        "model=hf",
        f"model.target={target}",
        "model.dtype=float32",
        "device=cpu",
        "task=code",
        "limit=3",
        "max_new_tokens=8",
        "repeats=1",
        "warmup=0",
        "remeasure=0",
    ]


def interrupted(target, out, monkeypatch) -> list[str]:
    """A cell stopped by Ctrl-C during its third prompt: two prompts' records (4 lines) kept."""
    real, calls = Runner.measure, []

    def measure(self, prompt):
        calls.append(prompt.id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, prompt)

    with monkeypatch.context() as m:
        m.setattr(Runner, "measure", measure)
        execute(compose([*tiny(target), f"out={out}"]), out)
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == 4 and cells.read(out)["status"] == "partial"
    return lines


def no_engine(monkeypatch):
    """Loading the target fails the test: a refusal must come before it."""

    def load_target(*_, **__):
        raise AssertionError("the engine was loaded")

    monkeypatch.setattr(lifecycle, "load_target", load_target)


def test_an_out_that_cannot_be_written_is_refused_before_the_engine_loads(
    tiny_target_dir, tmp_path, monkeypatch
):
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "run"  # under a regular file
    no_engine(monkeypatch)
    with pytest.raises(UserError, match=r"out='.*/file/run' cannot be created or written: Not a"):
        execute(compose([*tiny(tiny_target_dir), f"out={out}"]), out)


def test_a_cut_last_line_is_dropped_with_a_warning_and_the_cell_continues(
    tiny_target_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    kept = interrupted(tiny_target_dir, out, monkeypatch)
    with open(out / "records.jsonl", "a") as f:
        f.write('{"task": "code", "prompt_id": "code-03", "ro')  # a write killed half-way
    capsys.readouterr()
    summary, _, _ = execute(compose([*tiny(tiny_target_dir), f"out={out}"]), out)
    err = capsys.readouterr().err
    assert "last line was cut short" in err and "after its 4 whole records" in err
    lines = (out / "records.jsonl").read_text().splitlines()
    assert lines[:4] == kept and len(lines) == 6  # only the cut line dropped; the third prompt
    assert len({json.loads(x)["prompt_id"] for x in lines}) == 3
    assert summary.n_prompts.iloc[0] == 3 and cells.read(out)["status"] == "complete"


def test_a_corrupt_middle_line_is_one_error_line_and_the_file_is_left_as_it_is(
    tiny_target_dir, tmp_path, monkeypatch
):
    out = tmp_path / "run"
    lines = interrupted(tiny_target_dir, out, monkeypatch)
    lines[1] = lines[1][: len(lines[1]) // 2]  # not the last line: corruption, not a kill
    (out / "records.jsonl").write_text("\n".join(lines) + "\n")
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with monkeypatch.context() as m:
        no_engine(m)
        with pytest.raises(UserError, match=r"records.jsonl:2: not a record"):
            execute(compose([*tiny(tiny_target_dir), f"out={out}"]), out)
    p = subprocess.run(
        [sys.executable, "-m", "bench", *tiny(tiny_target_dir), f"out={out}"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out / 'records.jsonl'}:2: not a record")
    assert {name: (out / name).read_bytes() for name in before} == before  # (and Hydra's log)
