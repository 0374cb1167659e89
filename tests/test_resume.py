"""Resuming a run directory (bench.run.lifecycle.open_cell): what continues, what is refused, and an
out= that cannot be written; a refusal is one line, before the engine loads, the files kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, compose

from bench.run import cells, lifecycle
from bench.run.runner import Runner, execute
from groundfloor import provenance
from groundfloor.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only waits

ENV = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
CLEAN = {"commit": "a" * 40, "modified": [], "diff": None}
OTHER = {"commit": "b" * 40, "modified": ["bench/decode/loop.py"], "diff": "0123456789abcdef"}


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


def test_a_cell_measured_by_other_code_is_refused_and_kept(tiny_target_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    cfg = compose([*tiny(tiny_target_dir), "limit=1", f"out={out}"])
    monkeypatch.setattr(provenance, "code_state", lambda: CLEAN)
    execute(cfg, out)
    assert cells.read(out)["code"] == CLEAN
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    no_engine(monkeypatch)
    monkeypatch.setattr(provenance, "code_state", lambda: OTHER)
    with pytest.raises(UserError) as e:
        execute(cfg, out)  # complete: it would be skipped, and report the old code's results
    assert str(e.value).startswith(
        f"out={str(out)!r} was measured at commit aaaaaaaaaaaa (clean), this tree is "
        "bbbbbbbbbbbb (modified: bench/decode/loop.py); its results are left as they are"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_another_configuration_is_refused_naming_the_settings_that_differ(
    tiny_target_dir, tmp_path
):
    out = tmp_path / "run"
    execute(compose([*tiny(tiny_target_dir), "limit=1", f"out={out}"]), out)
    with pytest.raises(UserError) as e:
        execute(compose([*tiny(tiny_target_dir), "limit=2", "max_new_tokens=9", f"out={out}"]), out)
    assert "holds the results of another configuration (cell " in str(e.value)
    assert "; limit 1 → 2, max_new_tokens 8 → 9); choose another out=" in str(e.value)


def test_code_changes_name_the_commit_and_the_trees_modifications():
    assert cells.code_change(CLEAN, CLEAN) is None
    assert cells.code_change(CLEAN, OTHER) == (
        "commit aaaaaaaaaaaa (clean), this tree is bbbbbbbbbbbb (modified: bench/decode/loop.py)"
    )
    again = {**OTHER, "diff": "fedcba9876543210"}  # the same file, modified otherwise
    assert cells.code_change(OTHER, again).endswith(
        "(modified: bench/decode/loop.py), changed again since"
    )
    many = {**OTHER, "modified": [f"f{i}.py" for i in range(6)]}
    assert "modified: f0.py, f1.py, f2.py, f3.py and 2 more" in cells.code_change(CLEAN, many)


def test_outside_git_a_copy_is_told_apart_by_its_sources(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "loop.py").write_text("K = 1\n")
    (tmp_path / "bench" / "notes.log").write_text("not code")
    first = provenance.sources_hash(tmp_path)
    (tmp_path / "bench" / "notes.log").write_text("still not code")
    assert provenance.sources_hash(tmp_path) == first
    (tmp_path / "bench" / "loop.py").write_text("K = 2\n")
    then, now = ({"commit": None, "sources": h} for h in (first, provenance.sources_hash(tmp_path)))
    assert cells.code_change(then, then) is None
    assert cells.code_change(then, {**now, "modified": []}) == (
        f"a copy outside git (sources {first}), this tree is a copy outside git (sources "
        f"{now['sources']})"
    )


def test_a_cell_from_before_the_code_record_reads_env_jsons_git_sha(tmp_path):
    (tmp_path / "env.json").write_text(json.dumps({"git_sha": "c" * 40 + "-dirty"}))
    then = cells.recorded_code(tmp_path, {"hash": "h", "status": "complete"})
    assert then["commit"] == "c" * 40 and then["modified"] == ["files not recorded"]
    assert cells.code_change(then, {**then, "diff": None, "modified": []})
    (tmp_path / "env.json").unlink()
    assert cells.recorded_code(tmp_path, {"hash": "h", "status": "running"}) is None
