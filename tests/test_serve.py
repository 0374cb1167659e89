"""engine=openai without a model server: Prometheus parsing and the τ/α arithmetic, the load's
bounds, the client's failure kinds on real sockets, the server command, and the cell summary.
The real server (vLLM on 127.0.0.1) is exercised in test_server_vllm.py."""

from __future__ import annotations

import json
import socket
import threading
import time

import pandas as pd
import pytest
from conftest import compose

from bench.serve import client, scrape
from bench.serve.load import arrivals, run_pass
from bench.serve.summary import SERVE_COLUMNS, summarize
from tasks.prompt import Prompt

VLLM_TEXT = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="smol"} 40.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="smol"} 120.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="smol"} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="0"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="1"} 20.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="2"} 10.0
vllm:generation_tokens_total{engine="0",model_name="smol"} 180.0
vllm:generation_tokens_total{engine="1",model_name="smol"} 20.0
vllm:num_requests_running{engine="0",model_name="smol"} 0.0
"""


def test_counters_sum_labels_and_read_positions():
    c = scrape.counters(VLLM_TEXT, "vllm")
    assert c == {
        "drafts": 40,
        "draft_tokens": 120,
        "accepted_tokens": 60,
        "accepted_per_pos": [30, 20, 10],
        "generated_tokens": 200,
    }
    assert scrape.counters(VLLM_TEXT, "none") == {}


def test_difference_and_speculation_match_our_definitions():
    before = scrape.counters(VLLM_TEXT, "vllm")
    after = scrape.counters(
        VLLM_TEXT.replace("40.0", "50.0")
        .replace(" 120.0", " 150.0")
        .replace(" 60.0", " 75.0")
        .replace(" 30.0", " 36.0")
        .replace(" 20.0\n", " 25.0\n", 1)
        .replace(" 180.0", " 225.0"),
        "vllm",
    )
    d = scrape.difference(after, before)
    assert d["drafts"] == 10 and d["draft_tokens"] == 30 and d["accepted_tokens"] == 15
    assert d["generated_tokens"] == 45
    s = scrape.speculation(d, new_tokens=45, requests=5)
    # 45 tokens, 15 of them accepted drafts: 30 target forwards, τ = 1.5
    assert s["target_forwards"] == 30 and s["tau"] == pytest.approx(1.5)
    # 5 prefills: 25 decoding steps emit the other 40 tokens; vLLM's own mean acceptance
    # length counts the 10 steps that drafted only: 1 + 15 / 10
    assert s["tau_round"] == pytest.approx(40 / 25) and s["tau_nonempty"] == pytest.approx(2.5)
    assert s["acceptance_rate"] == pytest.approx(0.5)
    # 6 of 10 drafts accepted position 0: vLLM's marginal rate, stored under that name
    assert s["alpha_marginal"][0] == pytest.approx(0.6) and "alpha_per_pos" not in s
    assert scrape.speculation({}, 10)["tau"] is None  # no counters: nothing claimed


def test_sglang_gauges():
    text = (
        'sglang:spec_accept_length{model_name="m"} 2.5\n'
        'sglang:spec_accept_rate{model_name="m"} 0.4\n'
    )
    g = scrape.counters(text, "sglang")
    assert g == {"accept_length": 2.5, "accept_rate": 0.4}
    s = scrape.speculation(scrape.difference(g, {}), 100)
    # SGLang's gauge covers its own recent window, not this pass: never stored as τ
    assert s["accept_length_window"] == 2.5 and s["tau"] is None and s["tau_round"] is None
    assert s["acceptance_rate"] == 0.4 and s["source"] == "gauge"


def test_poisson_arrivals_are_seeded_and_paced():
    a = arrivals(2000, 20.0, seed=1)
    assert a == arrivals(2000, 20.0, seed=1) and a[0] == 0.0
    assert 2000 / a[-1] == pytest.approx(20.0, rel=0.1)
    assert arrivals(3, None, 0) == [0.0, 0.0, 0.0]


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_connection_error_is_counted_not_raised():
    r = client.stream("127.0.0.1", closed_port(), "chat", {"model": "m"}, timeout=5)
    assert r.error == "connection" and r.ttft_s is None


def test_silent_server_is_a_timeout():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)  # accepts connections, never answers
    try:
        t0 = time.perf_counter()
        r = client.stream("127.0.0.1", listener.getsockname()[1], "completions", {}, timeout=1)
        assert r.error == "timeout" and time.perf_counter() - t0 < 10
    finally:
        listener.close()


def prompts(n):
    return [Prompt(f"p{i}", "code", "code", [f"q{i}", f"r{i}"]) for i in range(n)]


def test_pass_respects_concurrency_count_and_time():
    live, peak, lock = [0], [0], threading.Lock()

    def send(prompt, turn, messages):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.05)
        with lock:
            live[0] -= 1
        r = client.Reply(text=f"a{turn}", sent=time.perf_counter())
        r.chunk_times, r.end = [r.sent], time.perf_counter()
        return r

    res = run_pass(
        prompts(3), send, concurrency=2, rate=None, num_requests=7, max_time_s=60, seed=0
    )
    assert res.started == 7 and res.not_started == 0 and peak[0] == 2
    assert len(res.turns) == 14  # two turns each, prompts cycled
    second = [t for t in res.turns if t.turn == 1][0]
    assert second.messages[1] == {"role": "assistant", "content": "a0"}  # turn 2 sees turn 1
    res = run_pass(
        prompts(3), send, concurrency=1, rate=None, num_requests=50, max_time_s=0.3, seed=0
    )
    assert 0 < res.started < 50 and res.started + res.not_started == 50


def test_failed_turn_ends_its_conversation():
    port = closed_port()
    send = lambda p, t, m: client.stream("127.0.0.1", port, "chat", {}, timeout=2)  # noqa: E731
    res = run_pass(
        prompts(2), send, concurrency=2, rate=None, num_requests=2, max_time_s=30, seed=0
    )
    assert [t.reply.error for t in res.turns] == ["connection", "connection"]
    assert all(t.turn == 0 for t in res.turns)


def test_server_command_fills_placeholders(tmp_path):
    from bench.serve.server import command

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    cfg = compose(["engine=openai", "server=vllm", "method=eagle3", "k=3", f"server.venv={venv}"])
    plain, spec = command(cfg, "baseline"), command(cfg, "method")
    assert plain[0] == str(venv / "bin" / "python") and "--speculative-config" not in plain
    assert spec[: len(plain)] == plain
    conf = json.loads(spec[-1])
    assert conf["method"] == "eagle3" and conf["num_speculative_tokens"] == 3
    assert conf["model"].endswith("artifacts/smollm2-135m/eagle3")
    assert plain[plain.index("--port") + 1] == "18011"
    assert plain[plain.index("--dtype") + 1] == "float32"
    sg = command(
        compose(["engine=openai", "server=sglang", "method=eagle3", "k=3", f"server.venv={venv}"]),
        "method",
    )
    assert sg[sg.index("--speculative-num-steps") + 1] == "3"
    assert sg[sg.index("--speculative-num-draft-tokens") + 1] == "4"  # a chain: steps + 1
    ng = json.loads(
        command(
            compose(["engine=openai", "server=vllm", "method=ngram", f"server.venv={venv}"]),
            "method",
        )[-1]
    )
    assert ng == {
        "method": "ngram",
        "num_speculative_tokens": 8,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 3,
    }


def record(
    role,
    prompt_id,
    turn,
    repeat=0,
    error=None,
    verdict=None,
    new=10,
    wall=1.0,
    ttft=0.1,
    task="code",
):
    return {
        "task": task,
        "prompt_id": prompt_id,
        "turn": turn,
        "repeat": repeat,
        "role": role,
        "temperature": 0.0,
        "error": error,
        "verdict": verdict,
        "new_tokens": 0 if error else new,
        "wall_s": wall,
        "ttft_s": None if error else ttft,
        "tpot_s": None if error else (wall - ttft) / (new - 1),
        "itl_s": [] if error else [0.1] * (new - 1),
    }


def test_summary_counts_errors_and_reads_counters():
    recs = pd.DataFrame(
        [
            record("baseline", "a", 0),
            record("baseline", "b", 0),
            record("method", "a", 0, verdict="exact", wall=0.5),
            record("method", "b", 0, verdict="mismatch", wall=0.5),
            record("method", "c", 0, error="http_400"),
            record("method", "d", 0, error="timeout"),
        ]
    )
    passes = [
        {
            "role": "baseline",
            "repeat": 0,
            "throughput_tok_s": 10.0,
            "new_tokens": 20,
            "not_started": 0,
            "counters": {},
        },
        {
            "role": "method",
            "repeat": 0,
            "throughput_tok_s": 20.0,
            "new_tokens": 20,
            "not_started": 3,
            "requests": 4,
            "counters": {
                "drafts": 5,
                "draft_tokens": 10,
                "accepted_tokens": 5,
                "accepted_per_pos": [4, 1],
                "generated_tokens": 20,
            },
        },
    ]
    ident = {
        "method": "ngram",
        "k": 2,
        "temperature": 0.0,
        "device": "cpu",
        "engine": "openai/vllm",
        "weights": "bfloat16",
        "dtype": "bfloat16",
        "server": "vllm",
        "concurrency": 4,
        "request_rate": None,
    }
    s = summarize(recs, passes, ident)
    assert list(s.columns) == SERVE_COLUMNS and len(s) == 1
    r = s.iloc[0]
    assert r.requests == 4 and r.errors_http == 1 and r.errors_timeout == 1
    assert r.errors_connection == 0 and r.not_started == 3
    assert r.speedup == pytest.approx(2.0) and r.tau == pytest.approx(20 / 15)
    assert json.loads(r.alpha_marginal) == [0.8, 0.2] and pd.isna(r.alpha_per_pos)
    assert r.tau_nonempty == pytest.approx(1 + 5 / 5)  # vLLM's mean acceptance length
    assert r.tau_round == pytest.approx((20 - 4) / (15 - 4))  # 4 prefills, 11 decoding steps
    assert r.exact_match == pytest.approx(0.5)  # a exact, b mismatch (c, d: no verdict)
    assert r.ttft_p50_ms == pytest.approx(100.0) and r.itl_p99_ms == pytest.approx(100.0)


def test_verdicts_judge_the_first_copy_of_each_turn():
    from types import SimpleNamespace

    from conftest import tiny_tokenizer

    from bench.serve.cell import Cell, first_copies, texts
    from bench.serve.load import PassResult, Turn

    p, q = prompts(2)

    def result(texts):  # texts: [(conv, prompt, turn, text, messages)]
        res = PassResult()
        for conv, pr, turn, text, msgs in texts:
            res.turns.append(Turn(conv, pr, turn, msgs, client.Reply(text=text)))
        return res

    m0 = [{"role": "user", "content": "q0"}]
    m1 = m0 + [{"role": "assistant", "content": "the sum"}, {"role": "user", "content": "r0"}]
    m1x = m0 + [{"role": "assistant", "content": "the sea"}, {"role": "user", "content": "r0"}]
    base = result(
        [
            (0, p, 0, "the sum", m0),
            (0, p, 1, "two three", m1),
            (1, q, 0, "a poem", [{"role": "user", "content": "q1"}]),
        ]
    )
    spec = result(
        [
            (0, p, 0, "the sea", m0),
            (0, p, 1, "two three", m1x),
            (1, q, 0, "a poem", [{"role": "user", "content": "q1"}]),
            (2, q, 0, "other copy", [{"role": "user", "content": "q1"}]),
        ]
    )
    cell = SimpleNamespace(cfg=SimpleNamespace(temperature=0.0), tokenizer=tiny_tokenizer())
    v = Cell.verdicts(cell, texts(base), spec)
    assert v[("p0", 0)] == {"verdict": "mismatch", "first_divergence": 1}  # "the" agrees
    assert v[("p0", 1)] == {"verdict": "after-divergence"}  # its prompt already differs
    assert v[("p1", 0)] == {"verdict": "exact"}  # judged on conversation 1, not the copy
    assert first_copies(spec)[("p1", 0)].conv == 1
    cell.cfg.temperature = 1.0
    assert Cell.verdicts(cell, texts(base), spec) == {}


def test_an_interrupted_server_cell_keeps_its_finished_passes(tmp_path):
    """restore(): passes with a passes.jsonl line and records are kept, a pass whose records
    landed without its line (killed between the two writes) and a cut last line are dropped,
    and the plain pass's texts come back from its records (first copy per prompt)."""
    from types import SimpleNamespace

    from bench.serve.cell import Cell

    def row(role, repeat, conv, pid, turn, text):
        return {
            "role": role,
            "repeat": repeat,
            "conv": conv,
            "prompt_id": pid,
            "turn": turn,
            "output_text": text,
            "error": None,
        }

    rows = [
        row("baseline", 0, 0, "p0", 0, "a"),
        row("baseline", 0, 0, "p0", 1, "b"),
        row("baseline", 0, 1, "p1", 0, "c"),
        row("baseline", 0, 2, "p1", 0, "second copy"),
        row("method", 0, 0, "p0", 0, "a"),
        row("method", 1, 0, "p0", 0, "killed before its pass line"),
    ]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = [{"role": "baseline", "repeat": 0}, {"role": "method", "repeat": 0}]
    (tmp_path / "passes.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in lines) + '{"role": "meth'
    )
    cell = SimpleNamespace(out=tmp_path, passes=[])
    done, base = Cell.restore(cell)
    assert done == {("baseline", 0), ("method", 0)} and cell.passes == lines
    assert base == {("p0", 0): "a", ("p0", 1): "b", ("p1", 0): "c"}
    kept = [json.loads(x) for x in open(tmp_path / "records.jsonl")]
    assert kept == rows[:5]
    assert [json.loads(x) for x in open(tmp_path / "passes.jsonl")] == lines


def server_cfg(tmp_path, *extra):
    """A vLLM cell whose server is never started (its python is an empty file)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "python").write_text("")
    return compose(["engine=openai", "server=vllm", "method=ngram", f"server.venv={venv}", *extra])


@pytest.mark.slow
def test_a_server_cell_selects_prompts_as_the_run_does(tmp_path):
    """limit_per_category and the context fit are the in-process run's (bench.run.lifecycle)."""
    from bench.run import lifecycle
    from bench.serve.cell import Cell

    cfg = server_cfg(tmp_path, "task=all", "limit_per_category=1")
    cell = Cell(cfg, tmp_path / "out")
    assert [p.id for p in cell.prompts] == [p.id for p in lifecycle.pick_prompts(cfg)]
    assert len(cell.prompts) == 7 and len({p.category for p in cell.prompts}) == 7


@pytest.mark.slow
def test_a_complete_server_cell_is_skipped_and_another_cells_folder_refused(tmp_path):
    """No server is started (its command does not exist): a complete cell of the same hash is
    skipped with its summary; a folder holding another cell is refused in one line."""
    from bench.run import cells
    from bench.serve.cell import execute
    from groundfloor.errors import UserError

    cfg, out = server_cfg(tmp_path, "task=code", "limit=1"), tmp_path / "out"
    cells.write(out, cells.cell_hash(cfg), "complete", 1, 1)
    (out / "summary.csv").write_text("method,speedup\nngram,1.0\n")
    summary, _, cell = execute(cfg, out)
    assert cell is None and list(summary["method"]) == ["ngram"]
    other = server_cfg(tmp_path, "task=code", "limit=2")
    with pytest.raises(UserError, match="holds the results of another configuration"):
        execute(other, out)


def test_backend_server_is_the_switch_and_engine_openai_its_alias(tmp_path):
    """backend=server selects the server backend; engine=openai still does, as the same cell."""
    from bench.run import cells
    from bench.run.config import backend, validate

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    new = compose(["backend=server", "server=vllm", "method=ngram", f"server.venv={venv}"])
    old = compose(["engine=openai", "server=vllm", "method=ngram", f"server.venv={venv}"])
    validate(new)
    validate(old)
    assert backend(new) == backend(old) == "server"
    assert backend(compose(["method=ngram"])) == "local"
    assert cells.cell_hash(new) == cells.cell_hash(old)
