"""The command line end to end on a tiny model, and bad input: one line, exit 2, nothing lost."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from conftest import ROOT, compose
from helpers import ENV, bench, tiny_args

from bench.outputs.metrics import COLUMNS


def test_run_writes_every_output(tiny_target_dir, tmp_path):
    out = tmp_path / "run"
    p = bench("method=ngram", "k=3", *tiny_args(tiny_target_dir, out))
    assert p.returncode == 0, p.stderr
    for name in ("records.jsonl", "summary.csv", "config.yaml", "env.json"):
        assert (out / name).exists(), name
    s = pd.read_csv(out / "summary.csv")
    assert list(s.columns) == COLUMNS
    assert s.exact_match.iloc[0] == 1.0 and s.k.iloc[0] == 3
    recs = [json.loads(line) for line in open(out / "records.jsonl")]
    assert len(recs) == 2 * 2 * 2  # prompts × roles × repeats (code is single-turn)
    assert {r["role"] for r in recs} == {"baseline", "method"}
    # 12 new tokens unless an EOS came first; the loop flag on every turn, and its summary
    for r in recs:
        assert r["stop_reason"] in ("eos", "budget"), r
        assert r["stop_reason"] == "eos" or r["new_tokens"] == 12, r
        assert isinstance(r["loop"], bool)
    assert 0 <= s.loop_share.iloc[0] <= 1 and s.decode_speedup.iloc[0] > 0
    env = json.loads((out / "env.json").read_text())
    assert env["device"] == "cpu" and env["torch"]
    assert "speedup" in p.stdout


def test_dialog_feeds_second_turn(tiny_target_dir, tmp_path):
    out = tmp_path / "dlg"
    args = tiny_args(tiny_target_dir, out, "repeats=1")
    args[4] = "task=dialog"
    p = bench("method=ngram", *args)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(line) for line in open(out / "records.jsonl")]
    t0 = [r for r in recs if r["turn"] == 0 and r["role"] == "baseline"]
    t1 = [r for r in recs if r["turn"] == 1 and r["role"] == "baseline"]
    assert len(t0) == len(t1) == 2
    # the second turn's prompt is exactly the conversation with the first answer in it, as the
    # tokenizer's chat template builds it (and not the one without the answer)
    from groundfloor.models import load_tokenizer
    from groundfloor.prompting import encode
    from tasks.loader import _task_cfg, load_prompts

    tok = load_tokenizer(str(tiny_target_dir))
    for prompt, a, b in zip(load_prompts(_task_cfg("dialog"), limit=2), t0, t1):
        assert a["prompt_id"] == b["prompt_id"] == prompt.id
        answer = tok.decode(a["output_ids"], skip_special_tokens=True)
        first = [{"role": "user", "content": prompt.turns[0]}]
        fed = first + [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": prompt.turns[1]},
        ]
        unfed = first + [{"role": "user", "content": prompt.turns[1]}]
        assert a["prompt_tokens"] == len(encode(tok, first, True))
        assert b["prompt_tokens"] == len(encode(tok, fed, True))
        assert len(encode(tok, fed, True)) > len(encode(tok, unfed, True)) + a["new_tokens"] // 2


def test_sweep_runs_each_job(tiny_target_dir, tmp_path):
    args = tiny_args(tiny_target_dir, tmp_path / "x", "limit=1", "repeats=1")
    p = bench("-m", "method=ngram", "k=2,4", *args, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert p.returncode == 0, p.stderr
    sums = sorted((tmp_path / "sweep").glob("*/summary.csv"))
    assert len(sums) == 2
    assert sorted(pd.read_csv(s).k.iloc[0] for s in sums) == [2, 4]


SWEEP_KNOB = ["-m", "method=eagle,eagle3", "method.top_k=1"]  # ngram, the default, has no top_k


def test_a_sweep_composes_a_knob_the_default_method_lacks():
    """Hydra composes a multirun once before any job with the sweep's own overrides left out
    (the default method in their place), then each job: both, as its sweeper does, with the
    overrides as `python -m bench` hands them over."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.errors import ConfigCompositionException
    from hydra.types import RunMode

    from bench.run.config import method_knob_overrides, register
    from groundfloor.paths import CONF

    register()
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF)))
    with pytest.raises(ConfigCompositionException):  # as given: Hydra's "not in struct"
        loader.load_configuration("config", SWEEP_KNOB[1:], RunMode.MULTIRUN)
    argv = method_knob_overrides(SWEEP_KNOB[1:])
    assert argv == ["method=eagle,eagle3", "++method.top_k=1"]
    master = loader.load_configuration("config", argv, RunMode.MULTIRUN)
    for name in ("eagle", "eagle3"):
        job = loader.load_sweep_config(master, [f"method={name}", *argv[1:]])
        assert job.method.name == name and job.method.top_k == 1
    # a knob the default method has goes as written (a sweep folder's hash reads the argv)
    assert method_knob_overrides(["method.k=2", "+method.x=1"]) == ["method.k=2", "+method.x=1"]


def test_a_sweep_with_such_a_knob_reaches_its_jobs(tmp_path):
    """From the command line: past Hydra's composition into the first job, whose own check
    (repeats=0 here, so that nothing loads) is the one line printed."""
    p = bench(*SWEEP_KNOB, "repeats=0", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    one_clear_line(p.returncode, p.stderr, "repeats=0 is not valid")


# end to end: a sample of each path a bad value can take (Hydra's overrides, validate(), a
# method's own checks, model loading); every rule and knob has its in-process case in
# tests/test_knobs.py
BAD = [
    (
        ["method=eagle9"],
        "method='eagle9' is unknown; choose one of: ar, draft, eagle, eagle3, "
        "hf_ar, hf_assisted, hf_pld, lookahead, medusa, ngram, oracle, recycling, sam, "
        "suffix",
    ),
    (
        ["method=hf_pld", "engine=lean"],
        "method=hf_pld runs transformers' generate() and needs engine=hf",
    ),
    (["method=hf_assisted", "method.schedule=often"], "method.schedule='often' is not valid"),
    (["task=nope"], "task='nope' is unknown"),
    (["model=nope"], "model='nope' is unknown"),
    (["tempreature=1"], "unknown setting 'tempreature'"),
    (["k=0"], "k=0 is not valid"),
    (
        ["model.dtype=float8"],
        "model.dtype='float8' is not valid; choose one of: auto, float32, bfloat16, float16",
    ),
    (["engine=turbo"], "engine='turbo' is not valid; choose one of: auto, hf, lean, openai"),
    (["k=abc"], "k='abc' is not valid; k takes an integer"),
    (["limit=abc"], "limit='abc' is not valid; limit takes an integer"),
    (["temperature=hot"], "temperature='hot' is not valid; temperature takes a number"),
    (["k=2,x"], "k='x' is not valid; k takes an integer"),
    (["resume=maybe"], "resume='maybe' is not valid; resume takes true or false"),
    (["model=hf"], "model=hf needs model.target="),
    (["method.k=x"], "method.k='x' is not valid for ngram; it takes an integer"),
    (
        ["method.foo=1"],
        "method.foo: ngram has no knob 'foo'; its knobs: k, max_k, fixed_k, min_n, max_n",
    ),
    (["method=medusa", "method.num_heads=two"], "method.num_heads='two' is not valid for medusa"),
    # a sweep's knob: every swept method must have it (the default method need not)
    (
        ["-m", "method=eagle,eagle3", "method.foo=1"],
        "method.foo: eagle has no knob 'foo'; its knobs: k, max_k, fixed_k, alpha1_forced, heads",
    ),
    (["-m", "method=eagle,ngram", "method.top_k=1"], "method.top_k: ngram has no knob 'top_k'"),
    (["model.kernel=onednn", "model.weights=int4"], "model.kernel=onednn runs float32 weights"),
    (
        ["model.weights=int3"],
        "model.weights='int3' is not valid; choose one of: auto, float32, "
        "bfloat16, float16, int8, int4",
    ),
    (["model.kernel=fast"], "model.kernel='fast' is not valid; choose one of: auto, aten, onednn"),
    (["engine=openai"], "engine=openai needs a server: server=llamacpp|sglang|vllm"),
    (["server=vllm"], "server=vllm needs engine=openai"),
    (
        ["engine=openai", "server=vllm", "server.venv=/nonexistent", "server.cmd=[nosuchserver]"],
        "server=vllm: 'nosuchserver' is not in /nonexistent/bin or PATH",
    ),
    (
        ["engine=openai", "server=vllm", "method=medusa"],
        "server=vllm has no speculative arguments for method=medusa",
    ),
    (["engine=hf", "model.weights=int4"], "model.weights='int4' needs engine=lean"),
    (["device=tpu"], "device='tpu' is unknown"),
    (["model=hf", "model.target=/nonexistent/model"], "cannot load model '/nonexistent/model'"),
    (["method=draft", "model.draft=null"], "method=draft needs a draft model"),
    (
        ["method=eagle3", "method.heads=/nonexistent"],
        "method.heads='/nonexistent' is not a directory",
    ),
    (["method=eagle", "method.total_tokens=lots"], "method.total_tokens='lots' is not valid"),
]


# One interpreter runs every case above as `python -m bench ARGV` would (runpy, as __main__; a
# fresh Hydra each time, stderr captured, SystemExit's code kept) instead of one interpreter
# start per case; a few cases also go through a real `python -m bench`.
DRIVER = """
import contextlib, io, json, runpy, sys, traceback
from hydra.core.global_hydra import GlobalHydra
results = []
for argv in json.loads(sys.stdin.read()):
    err, code = io.StringIO(), 0
    GlobalHydra.instance().clear()
    sys.argv = ["bench", *argv]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_module("bench", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code
        except BaseException:
            code = "raised"
            err.write(traceback.format_exc())
    results.append({"code": code, "stderr": err.getvalue()})
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def bad_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad")
    argvs = [[*args, "limit=1", f"out={out / str(i)}"] for i, (args, _) in enumerate(BAD)]
    p = subprocess.run(
        [sys.executable, "-c", DRIVER],
        cwd=ROOT,
        env=ENV,
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def one_clear_line(code, stderr: str, message: str) -> None:
    assert code == 2, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: ") and message in lines[-1], stderr
    assert "Traceback" not in stderr


@pytest.mark.xdist_group("bad_input")  # one worker runs the driver once (make test: loadgroup)
@pytest.mark.parametrize("case", range(len(BAD)), ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_clear_line(case, bad_results):
    one_clear_line(bad_results[case]["code"], bad_results[case]["stderr"], BAD[case][1])


FRESH = ["tempreature=1", "k=0", "model.target=/nonexistent/model"]  # overrides, validate, load


@pytest.mark.parametrize("arg", FRESH)
def test_bad_input_is_one_clear_line_from_a_fresh_interpreter(arg, tmp_path):
    args, message = next((a, m) for a, m in BAD if arg in a)
    p = bench(*args, "limit=1", f"out={tmp_path / 'o'}")
    one_clear_line(p.returncode, p.stderr, message)


@pytest.mark.parametrize(
    "args, setting",
    [
        (["method=ngram", "out=/proc/x"], "out"),
        (["-m", "method=ngram,draft", "hydra.sweep.dir=/proc/x"], "hydra.sweep.dir"),
    ],
    ids=["run", "sweep"],
)
def test_an_out_that_cannot_be_written_is_one_line_before_anything_loads(args, setting, tmp_path):
    """Checked from the command line before Hydra creates the folder: no engine, not even
    torch, is loaded (a torch that fails on import stands in for it; bench.run.lifecycle.open_cell
    checks each cell's folder again)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('torch was imported')")
    p = subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=dict(ENV, PYTHONPATH=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        f"error: {setting}='/proc/x' cannot be created or written: No such file or directory"
    ]


def test_malformed_jsonl_names_file_and_line(tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_text('{"question_id": 1, "category": "qa", "turns": ["hi"]}\n{"question_id": 2,\n')
    p = bench("task=jsonl", f"task.path={f}", f"out={tmp_path / 'o'}")
    assert p.returncode == 2
    assert f"{f}:2: not valid JSON" in p.stderr
    f.write_text('{"question_id": 1, "category": "qa", "turns": "hi"}\n')
    p = bench("task=jsonl", f"task.path={f}", f"out={tmp_path / 'o'}")
    assert f"{f}:1: 'turns' must be a non-empty list of strings" in p.stderr


def test_vocab_mismatch_refused(tiny_target_dir, tmp_path):
    from conftest import save_tiny, tiny_tokenizer

    d = save_tiny(tmp_path / "other", seed=3)
    tok = tiny_tokenizer()
    tok.add_tokens(["zzz"])
    tok.save_pretrained(d)
    p = bench("method=draft", f"model.draft={d}", *tiny_args(tiny_target_dir, tmp_path / "o"))
    assert p.returncode == 2
    assert "has a different vocabulary from the target" in p.stderr.strip().splitlines()[-1]


def test_interrupted_run_keeps_finished_prompts(tiny_target_dir, tmp_path, monkeypatch):
    """A failure on the second prompt leaves the first prompt's records on disk."""
    from bench.run.runner import Runner
    from methods.ngram import NGram

    # k fixed: k=auto would add one untimed turn (warmup=0) measuring the lookup's cost
    args = ["method=ngram", "k=4", *tiny_args(tiny_target_dir, tmp_path, "repeats=1"), "warmup=0"]
    runner = Runner(compose(args), tmp_path)
    calls = {"n": 0}

    def flaky(self, state):  # the method's second conversation is prompt 2
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(NGram, "start", flaky)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    recs = [json.loads(line) for line in open(tmp_path / "records.jsonl")]
    assert {r["prompt_id"] for r in recs} == {runner.prompts[0].id}


def test_each_cell_reports_its_time_outside_the_measured_turns_and_the_sweeps_total():
    from bench import __main__ as cli

    cli.OUTSIDE.clear()
    first = cli.outside_line({"engine_load": 2.0, "warmup": 1.5})
    assert first.startswith("outside the measured turns: 3.5 s (engine_load 2.0 s, warmup 1.5 s)")
    second = cli.outside_line({"engine_load": 0.1, "warmup": 1.0})
    assert "this sweep so far 4.6 s (engine_load 2.1 s, warmup 2.5 s)" in second


def test_engine_check_configs_name_dtype_kernel_and_compile():
    from bench.tools.engine_check import parse

    c = parse("lean:int4:native_q8a")
    assert (c["weights"], c["dtype"], c["kernel"], c["compile"]) == (
        "int4",
        "auto",  # lean's own choice, resolved at load (float32 on our kernels)
        "native_q8a",
        False,
    )
    assert parse("lean:bfloat16")["dtype"] == "auto"  # float32 activations on native_bf16
    assert parse("lean:bfloat16:bfloat16")["dtype"] == "bfloat16"
    c = parse("hf:bfloat16:compile")
    assert (c["dtype"], c["kernel"], c["compile"]) == ("bfloat16", "auto", True)
    with pytest.raises(SystemExit, match="engine:weights"):
        parse("vllm:int4")
