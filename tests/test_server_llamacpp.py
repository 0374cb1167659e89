"""llama.cpp as a real peer: its server (llama-cpp-python, `make install-llamacpp`, built from
source for the CPU at hand) serving the embedded GGUF on 127.0.0.1, started and stopped by the
suite, and its worker beside our engines in `bench.tools.engine_check`. The venv is a build of
several minutes, never part of CI: without it these tests skip.

One cell with llama.cpp's prompt lookup on and off checks the usual outputs, the greedy verdicts
and the latency columns (llama.cpp exposes no speculative counters: τ and α stay empty), and that
the server does not outlive its cell; engine_check's llama.cpp row decodes the same token ids.
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
from bench.tools import llamacpp_peer

pytestmark = [pytest.mark.server, pytest.mark.slow]

VENVS = Path(os.environ.get("SPECSWEEP_VENVS", Path.home() / ".cache/specsweep/venvs"))
if not (VENVS / "llamacpp" / "bin" / "python").exists():
    pytest.skip(
        f"llama-cpp-python is not in {VENVS}/llamacpp (make install-llamacpp)",
        allow_module_level=True,
    )

COMMON = [
    "engine=openai",
    "server=llamacpp",
    "task=code",
    "limit=3",
    "max_new_tokens=32",
    "repeats=1",
    "warmup=1",
    "request_timeout_s=600",
]


def run(*args, timeout=1800):
    import subprocess
    import sys

    from conftest import ROOT

    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=dict(ENV, SPECSWEEP_VENVS=str(VENVS)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    out = tmp_path_factory.mktemp("llamacpp") / "cell"
    p = run(*COMMON, "method=ngram", "k=4", "concurrency=1", f"out={out}")
    assert p.returncode == 0, p.stderr[-3000:]
    return out, p.stdout


def test_a_llamacpp_cell_writes_the_usual_outputs(cell):
    out, stdout = cell
    for name in ("records.jsonl", "summary.csv", "passes.jsonl", "env.json", "answers/ar.jsonl"):
        assert (out / name).exists(), name
    s = pd.read_csv(out / "summary.csv")
    assert list(s.columns) == SERVE_COLUMNS
    env = json.loads((out / "env.json").read_text())
    assert env["server"] == "llamacpp"
    assert "prompt-lookup-decoding" in env["server_argv"]["method"]
    assert "prompt-lookup-decoding" not in env["server_argv"]["baseline"]
    assert "--model" in env["server_argv"]["baseline"]
    row = s.iloc[-1]
    assert row.requests == 3 and row.errors_connection == row.errors_http == 0
    assert 0 < row.ttft_p50_ms <= row.ttft_p99_ms and 0 < row.tpot_p50_ms <= row.tpot_p99_ms
    assert row.tokens_per_s > 0 and row.baseline_tokens_per_s > 0
    assert row.speedup == pytest.approx(row.tokens_per_s / row.baseline_tokens_per_s)
    assert pd.isna(row.tau)  # no speculative counters to read
    assert "llamacpp" in stdout


def test_llamacpp_greedy_verdicts_say_what_the_texts_say(cell):
    out, _ = cell
    recs = [json.loads(x) for x in open(out / "records.jsonl")]
    base = {r["prompt_id"]: r["output_text"] for r in recs if r["role"] == "baseline"}
    method = [r for r in recs if r["role"] == "method"]
    assert len(method) == 3 and all(r["new_tokens"] > 0 for r in method)
    for r in method:
        assert r["verdict"] in ("exact", "mismatch")
        assert (r["verdict"] == "exact") == (r["output_text"] == base[r["prompt_id"]])


def test_the_llamacpp_server_does_not_outlive_its_cell(cell):
    assert get("http://127.0.0.1:18013/v1/models", timeout=2)[0] == 0


def test_the_peer_decodes_the_same_ids_greedily_and_times_its_steps():
    from groundfloor.models import embedded_gguf, load_tokenizer
    from groundfloor.prompting import encode

    tok = load_tokenizer("embedded:smollm2-135m")
    ids = encode(tok, [{"role": "user", "content": "Write a haiku about rivers."}], True)
    with llamacpp_peer.Peer(embedded_gguf("embedded:smollm2-135m")) as peer:
        out, t_prefill, t_decode = peer.decode(ids, 12)
        again, _, _ = peer.decode(ids, 12)
    assert len(out) == 12 and out == again  # greedy from an empty cache: the same each time
    assert t_prefill > 0 and t_decode > 0 and peer.version
    text = tok.decode(out)
    assert text.strip(), text
