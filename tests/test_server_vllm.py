"""The server backend against a real server: vLLM's CPU build serving the embedded model on
127.0.0.1, started and stopped by the suite (`make install-vllm` puts it in its own virtualenv;
SPECSWEEP_VENVS says where). Minutes on 2 cores, so behind the `server` marker. `make test` (and
CI) runs one cell and its resume (three server starts); the `server_full` tests (the concurrency
sweep, HTTP errors, EAGLE-3: eight more starts) run with `make test-server`.

One cell with vLLM's n-gram speculation on and off checks the counters, the latency columns, the
greedy verdicts, that no server outlives its cell and that a cell cut after its plain pass runs
only the missing pass; a concurrency sweep (server_full) checks overlapping requests; one EAGLE-3
cell serves our shipped head (artifacts/smollm2-135m/eagle3, unchanged) beside the same head in
our engine, and the report puts their τ and α per position side by side.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from helpers import ENV

from bench.serve.server import get
from bench.serve.summary import SERVE_COLUMNS

pytestmark = [pytest.mark.server, pytest.mark.slow]

VENVS = Path(os.environ.get("SPECSWEEP_VENVS", Path.home() / ".cache/specsweep/venvs"))
HAVE_VLLM = (VENVS / "vllm" / "bin" / "python").exists()
if not HAVE_VLLM and not os.environ.get("CI"):
    pytest.skip(
        f"vLLM's CPU build is not in {VENVS}/vllm (make install-vllm)", allow_module_level=True
    )

# float32: the CPU build's fast path without avx512_bf16, and greedy comparisons free of bf16
# near-ties; short answers keep each cell to a minute or two on 2 cores
COMMON = [
    "engine=openai",
    "server=vllm",
    "server.dtype=float32",
    "task=code",
    "limit=3",
    "max_new_tokens=32",
    "repeats=1",
    "warmup=1",
    "request_timeout_s=600",
]
SERVER_ENV = dict(ENV, SPECSWEEP_VENVS=str(VENVS))


def run(*args, timeout=3000):
    import subprocess
    import sys

    from conftest import ROOT

    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=SERVER_ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def passes(cell: Path) -> dict:
    return {p["role"]: p for p in map(json.loads, open(cell / "passes.jsonl"))}


@pytest.fixture(scope="module")
def ngram_cell(tmp_path_factory):
    """One cell (two server starts): what CI runs; the concurrency sweep is server_full."""
    out = tmp_path_factory.mktemp("vllm") / "cell"
    p = run(*COMMON, "method=ngram", "k=4", "concurrency=1", f"out={out}")
    assert p.returncode == 0, p.stderr[-3000:]
    return [out], p.stdout


@pytest.fixture(scope="module")
def ngram_sweep(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("vllm") / "sweep"
    # `concurrency=1,3` sweeps without -m, as the README shows
    p = run(*COMMON, "method=ngram", "k=4", "concurrency=1,3", f"hydra.sweep.dir={sweep}")
    assert p.returncode == 0, p.stderr[-3000:]
    cells = sorted(sweep.glob("*/summary.csv"))
    assert len(cells) == 2, p.stderr[-3000:]
    return [c.parent for c in cells], p.stdout


def test_a_cell_writes_the_usual_outputs(ngram_cell):
    cells, stdout = ngram_cell
    for cell in cells:
        for name in (
            "records.jsonl",
            "summary.csv",
            "passes.jsonl",
            "config.yaml",
            "env.json",
            "answers/ar.jsonl",
            "answers/ngram.jsonl",
            "server_baseline_0.log",
            "server_method_0.log",
        ):
            assert (cell / name).exists(), (cell, name)
        s = pd.read_csv(cell / "summary.csv")
        assert list(s.columns) == SERVE_COLUMNS
        env = json.loads((cell / "env.json").read_text())
        assert env["server"] == "vllm" and "0.32" in (env["server_version"] or "")
        assert "--speculative-config" in env["server_argv"]["method"]
        assert "--speculative-config" not in env["server_argv"]["baseline"]
    assert "TTFT p50/p99 ms" in stdout and "vllm" in stdout


@pytest.mark.server_full
def test_sweep_writes_one_cell_per_concurrency(ngram_sweep):
    cells, stdout = ngram_sweep
    assert sorted(int(pd.read_csv(c / "summary.csv").concurrency.iloc[0]) for c in cells) == [1, 3]
    assert "TTFT p50/p99 ms" in stdout and "vllm" in stdout


def test_counters_give_tau_and_alpha(ngram_cell):
    for cell in ngram_cell[0]:
        ps = passes(cell)
        spec, plain = ps["method"]["counters"], ps["baseline"]["counters"]
        assert spec["drafts"] > 0 and spec["draft_tokens"] >= spec["drafts"]
        assert 0 < spec["accepted_tokens"] <= spec["draft_tokens"]
        assert len(spec["accepted_per_pos"]) == 4  # k = 4 positions
        assert sum(spec["accepted_per_pos"]) == spec["accepted_tokens"]
        assert not plain.get("drafts")  # the plain server drafts nothing
        # the server's generated-token counter covers exactly the pass's requests
        assert spec["generated_tokens"] == ps["method"]["new_tokens"]
        s = pd.read_csv(cell / "summary.csv").iloc[-1]
        n, a = spec["generated_tokens"], spec["accepted_tokens"]
        assert s.tau == pytest.approx(n / (n - a)) and s.tau > 1
        assert s.acceptance_rate == pytest.approx(a / spec["draft_tokens"])
        assert json.loads(s.alpha_marginal)[0] == pytest.approx(
            spec["accepted_per_pos"][0] / spec["drafts"], abs=1e-4
        )
        assert s.tau_nonempty == pytest.approx(1 + a / spec["drafts"])


def test_latency_columns(ngram_cell):
    latency_columns_and_overlap(ngram_cell[0][0])


@pytest.mark.server_full
def test_latency_columns_and_concurrency(ngram_sweep):
    for cell in ngram_sweep[0]:
        latency_columns_and_overlap(cell)


def latency_columns_and_overlap(cell):
    s = pd.read_csv(cell / "summary.csv").iloc[-1]
    assert s.requests == 3 and s.errors_connection == s.errors_timeout == s.errors_http == 0
    assert 0 < s.ttft_p50_ms <= s.ttft_p99_ms
    assert 0 < s.tpot_p50_ms <= s.tpot_p99_ms and 0 < s.itl_p50_ms <= s.itl_p99_ms
    assert s.tokens_per_s > 0 and s.baseline_tokens_per_s > 0
    assert s.speedup == pytest.approx(s.tokens_per_s / s.baseline_tokens_per_s)
    recs = [json.loads(x) for x in open(cell / "records.jsonl")]
    assert all(r["new_tokens"] > 0 and r["ttft_s"] > 0 for r in recs)
    method = [r for r in recs if r["role"] == "method"]
    overlap = sum(
        1
        for a in method
        for b in method
        if a is not b and a["sent_s"] <= b["sent_s"] < a["sent_s"] + a["wall_s"]
    )
    if s.concurrency == 1:  # one request at a time
        assert overlap == 0
    else:  # three at once
        assert overlap >= 2


def test_greedy_verdicts(ngram_cell):
    for cell in ngram_cell[0]:
        recs = [json.loads(x) for x in open(cell / "records.jsonl")]
        method = [r for r in recs if r["role"] == "method"]
        assert all(r["verdict"] in ("exact", "mismatch") for r in method)
        base = {r["prompt_id"]: r["output_text"] for r in recs if r["role"] == "baseline"}
        for r in method:  # the verdict says what the texts say
            assert (r["verdict"] == "exact") == (r["output_text"] == base[r["prompt_id"]])
        s = pd.read_csv(cell / "summary.csv").iloc[-1]
        assert s.exact_match == pytest.approx(
            sum(r["verdict"] == "exact" for r in method) / len(method)
        )
        if s.concurrency == 1:  # float32, one request at a time: n-gram speculation is exact
            assert s.exact_match == 1.0


def test_servers_do_not_outlive_their_cell(ngram_cell):
    assert get("http://127.0.0.1:18011/health", timeout=2)[0] == 0


def test_an_interrupted_cell_runs_only_its_missing_pass(ngram_cell, tmp_path):
    """The concurrency=1 cell, cut after its plain pass (the speculative pass's line and records
    gone, cell.json running), continues with one server start: the plain pass's log and records
    are kept as they were, the speculative pass runs again, and the cell is complete."""
    import shutil

    src = ngram_cell[0][0]
    cell = tmp_path / "cut"
    shutil.copytree(src, cell)
    rows = [json.loads(x) for x in open(cell / "records.jsonl")]
    plain = [r for r in rows if r["role"] == "baseline"]
    (cell / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain))
    (cell / "passes.jsonl").write_text(json.dumps(passes(cell)["baseline"]) + "\n")
    state = json.loads((cell / "cell.json").read_text())
    (cell / "cell.json").write_text(json.dumps({**state, "status": "running"}))
    (cell / "summary.csv").unlink()
    before = (cell / "server_baseline_0.log").stat().st_mtime_ns
    p = run(*COMMON, "method=ngram", "k=4", "concurrency=1", f"out={cell}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "continued after its finished passes" in p.stderr
    assert (cell / "server_baseline_0.log").stat().st_mtime_ns == before
    assert set(passes(cell)) == {"baseline", "method"}
    again = [json.loads(x) for x in open(cell / "records.jsonl")]
    assert [r for r in again if r["role"] == "baseline"] == plain
    assert {r["verdict"] for r in again if r["role"] == "method"} <= {"exact", "mismatch"}
    assert json.loads((cell / "cell.json").read_text())["status"] == "complete"


@pytest.mark.server_full
def test_http_errors_are_counted_and_shown(tmp_path):
    """Requests the server refuses (max_tokens past its context) are counted, not dropped."""
    out = tmp_path / "err"
    p = run(*COMMON, "method=ngram", "limit=2", "max_new_tokens=100000", f"out={out}")
    assert p.returncode == 0, p.stderr[-3000:]
    s = pd.read_csv(out / "summary.csv").iloc[-1]
    assert s.requests == 2 and s.errors_http == 2 and pd.isna(s.ttft_p50_ms)
    recs = [json.loads(x) for x in open(out / "records.jsonl")]
    assert {r["error"] for r in recs} == {"http_400"}
    assert all("max_tokens" in r["error_detail"] for r in recs)
    assert "2 http" in p.stdout


@pytest.mark.server_full
def test_eagle3_head_in_vllm_beside_ours(tmp_path):
    """Our shipped EAGLE-3 head served by vLLM, and the same head in our engine: the report
    puts τ and α per position side by side."""
    from bench.report import build

    served, ours = tmp_path / "served", tmp_path / "ours"
    p = run(*COMMON, "method=eagle3", "k=3", "limit=2", f"out={served}")
    assert p.returncode == 0, p.stderr[-3000:]
    spec = passes(served)["method"]["counters"]
    assert spec["drafts"] > 0 and spec["accepted_tokens"] > 0  # vLLM accepts our head's drafts
    assert len(spec["accepted_per_pos"]) == 3
    p = run(
        "method=eagle3",
        "k=3",
        "task=code",
        "limit=2",
        "max_new_tokens=32",
        "repeats=1",
        "warmup=0",
        "model.dtype=float32",
        "device=cpu",
        f"out={ours}",
    )
    assert p.returncode == 0, p.stderr[-3000:]
    index = build([served, ours], tmp_path / "report")
    text = index.read_text()
    assert "## Under load" in text and "### Servers (`backend=server`" in text
    assert "#### Same drafter, two engines" in text
    pairs = pd.read_csv(tmp_path / "report" / "same_drafter.csv")
    assert list(pairs.method) == ["eagle3"] and pairs["τ server"].iloc[0] > 1
    assert pairs["τ ours"].iloc[0] > 1
    assert len(pairs["α per position, server"].iloc[0].split(" / ")) == 3
