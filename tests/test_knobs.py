"""Every rule on the run config and every method knob has a bad-input case: one line naming the
key, the bad value and what is valid.

Both tables are checked for completeness against the code: every `_need` rule in
`bench.run.config.validate`/`validate_serving` must be the one a case trips, and every knob in
`conf/method/*.yaml` must have a case or a reason why no value of the right type is wrong.
Cases run in-process (no subprocess per case); tests/test_cli.py runs a sample end to end."""

from __future__ import annotations

import ast
import inspect

import pytest
from conftest import compose
from helpers import build, make_ctx
from omegaconf import OmegaConf

from bench.run import config
from bench.run.config import CONF, check_overrides, method_defaults, validate
from groundfloor.errors import UserError
from methods.registry import build_method, method_tests

pytestmark = pytest.mark.usefixtures("one_thread")

SERVE = ["engine=openai", "server=vllm"]
RULES = [  # (overrides, message): each trips one rule of validate()/validate_serving()
    (["engine=turbo"], "engine='turbo' is not valid; choose one of: auto, hf, lean, openai"),
    (["model=hf"], "model=hf needs model.target=... (e.g. model.target=<Hugging Face id"),
    (["k=0"], "k=0 is not valid; use an integer >= 1 or auto (chosen per round)"),
    (["temperature=-0.5"], "temperature=-0.5 is not valid; use a value >= 0"),
    (["top_k=-1"], "top_k=-1 is not valid; use 0 (off) or a positive integer"),
    (["top_p=1.5"], "top_p=1.5 is not valid; use a value in (0, 1]"),
    (["max_new_tokens=0"], "max_new_tokens=0 is not valid; use an integer >= 1"),
    (["limit=0"], "limit=0 is not valid; use an integer >= 1 (prompts per task)"),
    (["limit_per_category=0"], "limit_per_category=0 is not valid; use an integer >= 1"),
    (["task.truncate=middle"], "task.truncate='middle' is not valid; choose left, right or null"),
    (["repeats=0"], "repeats=0 is not valid; use an integer >= 1"),
    (["warmup=-1"], "warmup=-1 is not valid; use an integer >= 0"),
    (["remeasure=-1"], "remeasure=-1 is not valid; use an integer >= 0"),
    (["disturb_ratio=0.9"], "disturb_ratio=0.9 is not valid; use a factor > 1"),
    (["disturb_others=0"], "disturb_others=0.0 is not valid; use a share of the machine in (0, 1]"),
    (["check=bogus"], "check='bogus' is not valid; choose one of: none, distribution"),
    (
        ["drafter_weights=int4"],
        "drafter_weights='int4' is not valid; choose one of: auto, float, int8",
    ),
    (["check=distribution"], "check=distribution compares sampled outputs: set temperature > 0"),
    (["dist_samples=1"], "dist_samples=1 is not valid; use an integer >= 2"),
    (["dist_positions=0"], "dist_positions=0 is not valid; use an integer >= 1"),
    (
        ["method=hf_pld", "engine=lean"],
        "method=hf_pld runs transformers' generate() and needs engine=hf",
    ),
    (["method.k=-1"], "method.k=-1 is not valid; use an integer >= 1"),
    (["server=vllm"], "server=vllm needs engine=openai"),
    (["engine=openai"], "engine=openai needs a server: server=llamacpp|sglang|vllm"),
    (["backend=server"], "backend=server needs a server: server=llamacpp|sglang|vllm"),
    (["backend=cloud"], "backend='cloud' is not valid; choose one of: local, server"),
    (SERVE + ["concurrency=0"], "concurrency=0 is not valid; use an integer >= 1"),
    (SERVE + ["batch=4"], "batch=4 batches the in-process engine; a server's load is concurrency="),
    (["batch=0"], "batch=0 is not valid; use an integer >= 1"),
    (["batch=2", "method=hf_pld"], "batch=2: method=hf_pld runs transformers' generate()"),
    (
        ["batch=2", "temperature=1", "check=distribution"],
        "batch=2 with check=distribution: the distribution check samples one sequence",
    ),
    (SERVE + ["request_rate=0"], "request_rate=0.0 is not valid; use a value > 0 or null"),
    (SERVE + ["num_requests=0"], "num_requests=0 is not valid; use an integer >= 1 or null"),
    (SERVE + ["max_time_s=0"], "max_time_s=0.0 is not valid; use a value > 0"),
    (SERVE + ["request_timeout_s=-1"], "request_timeout_s=-1.0 is not valid; use a value > 0"),
    (
        SERVE + ["server.api=grpc"],
        "server.api='grpc' is not valid; choose one of: chat, completions",
    ),
    (
        SERVE + ["server.metrics=prom"],
        "server.metrics='prom' is not valid; choose one of: vllm, sglang, none",
    ),
    (
        SERVE + ["server.host=10.0.0.5"],
        "server.host='10.0.0.5': the suite starts its server on this machine; use 127.0.0.1",
    ),
    (
        SERVE + ["temperature=1", "check=distribution"],
        "check=distribution needs the target's logits: not on engine=openai",
    ),
]


def refusal(fn, *args, **kw) -> str:
    """fn(*args, **kw) must refuse with a UserError of one line; → its message."""
    with pytest.raises(UserError) as e:
        fn(*args, **kw)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


def tripped_rule(overrides):
    """(message, line of the `_need` call in bench/run/config.py that refused the config)."""
    cfg = compose(overrides)
    with pytest.raises(UserError) as e:
        validate(cfg)
    tb = e.tb
    line = None
    while tb is not None:  # the innermost frame of validate/validate_serving: the rule's line
        if tb.tb_frame.f_code.co_name in ("validate", "validate_serving"):
            line = tb.tb_lineno
        tb = tb.tb_next
    return str(e.value), line


def rule_lines() -> set[int]:
    """Lines of every `_need(...)` call in validate and validate_serving."""
    src = inspect.getsource(config)
    out = set()
    for fn in ast.parse(src).body:
        if isinstance(fn, ast.FunctionDef) and fn.name in ("validate", "validate_serving"):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_need":
                    out.add(node.lineno)
    return out


@pytest.mark.parametrize("overrides,message", RULES)
def test_each_rule_is_one_line(overrides, message):
    got, _ = tripped_rule(overrides)
    assert message in got and "\n" not in got, got


def test_every_rule_has_a_case():
    hit = {tripped_rule(o)[1] for o, _ in RULES}
    missing = rule_lines() - hit
    assert not missing, f"rules in bench/run/config.py without a bad-input case: lines {missing}"


# --- method knobs: the cases live in each method's YAML (`_test`) -------------------------


def method_names() -> list[str]:
    return sorted(p.stem for p in (CONF / "method").glob("*.yaml"))


# (method, {knob: bad value}, message), from each method's YAML
KNOBS = [
    (m, case["knobs"], case["says"])
    for m in method_names()
    for case in method_tests(m).get("bad", [])
]
NO_CASE = {
    (m, k): why for m in method_names() for k, why in method_tests(m).get("any_value", {}).items()
}


def knobs_of(name: str) -> list[str]:
    return [k for k in method_defaults(name) if not k.startswith("_") and k != "name"]


def test_every_method_knob_has_a_case_or_a_reason():
    covered = {(m, k) for m, kw, _ in KNOBS for k in kw} | set(NO_CASE)
    missing = [(m, k) for m in method_names() for k in knobs_of(m) if (m, k) not in covered]
    assert not missing, f"method knobs without a bad-input case: {missing}"


@pytest.mark.parametrize("name", method_names())
def test_every_method_builds_with_its_defaults(env, name):
    build(env, name, {})  # so each bad case below fails for its knob, not for the setup


@pytest.mark.parametrize(
    "name,knobs,message", KNOBS, ids=[f"{m}-{'-'.join(kw)}" for m, kw, _ in KNOBS]
)
def test_each_bad_knob_is_one_line(env, name, knobs, message):
    msg = refusal(build, env, name, knobs)
    assert message in msg, msg


NEEDS = [
    ("draft", "method=draft needs a draft model: set model.draft="),
    ("hf_assisted", "method=hf_assisted needs a draft model: set model.draft="),
    ("medusa", "method=medusa needs heads: set method.heads=<dir> or model.medusa"),
    ("eagle", "method=eagle needs a head: set method.heads=<dir or Hub id> or model.eagle"),
    ("eagle3", "method=eagle3 needs a head: set method.heads=<dir or Hub id> or model.eagle3"),
]


@pytest.mark.parametrize("name,message", NEEDS)
def test_a_missing_drafter_is_one_line(env, name, message):
    """A method whose drafter is neither its own knob nor in the model's config."""
    msg = refusal(build, env, name, {}, drafters=False)
    assert message in msg, msg


TYPED = [
    (m, k, v)
    for m in method_names()
    for k, v in method_defaults(m).items()
    if isinstance(v, (bool, int, float)) and not k.startswith("_")
]


@pytest.mark.parametrize("name,knob,default", TYPED, ids=[f"{m}-{k}" for m, k, _ in TYPED])
def test_each_typed_knob_refuses_the_wrong_type(name, knob, default):
    bad = "maybe" if isinstance(default, bool) else "abc"
    msg = refusal(check_overrides, [f"method={name}", f"method.{knob}={bad}"])
    assert f"method.{knob}='{bad}' is not valid for {name}; it takes" in msg


def knob_schemas():
    """(method name, its Knobs dataclass) for each method reading knobs through methods.knobs."""
    import dataclasses
    import importlib

    out = []
    for name in method_names():
        module = importlib.import_module(method_defaults(name)["_target_"].rsplit(".", 1)[0])
        for obj in vars(module).values():
            if dataclasses.is_dataclass(obj) and obj.__name__.endswith("Knobs"):
                out.append((name, obj))
    return out


def test_each_knob_a_method_reads_has_its_default_in_its_yaml():
    from methods import knobs

    schemas = knob_schemas()
    assert {n for n, _ in schemas} >= {"suffix", "lookahead", "medusa", "recycling", "sam"}
    for name, schema in schemas:
        read = knobs.read(OmegaConf.create(method_defaults(name)), schema)  # every field there
        assert read is not None, name


def test_no_method_repeats_a_default_in_code():
    """`cfg.get(knob, default)` in methods/ would be a second home for a YAML default."""
    import pathlib

    repeated = []
    for path in sorted(pathlib.Path(CONF.parent / "methods").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            call = node if isinstance(node, ast.Call) else None
            f = getattr(call, "func", None)
            if isinstance(f, ast.Attribute) and f.attr == "get" and len(call.args) == 2:
                if "cfg" in ast.unparse(f.value):
                    repeated.append(f"{path.name}:{node.lineno} {ast.unparse(call)}")
    assert not repeated, repeated


def test_a_knob_of_the_wrong_type_in_a_node_is_one_line(env):
    msg = refusal(build, env, "suffix", {"max_depth": "deep"})
    assert msg == "method.max_depth='deep' is not valid; it takes an integer", msg
    msg = refusal(build, env, "sam", {"min_match": 2.5})
    assert "method.min_match=2.5 is not valid; it takes an integer" in msg


def test_a_partial_node_takes_the_rest_from_its_yaml(env):
    ctx = make_ctx(env["lean"])
    m = build_method({"_target_": "methods.suffix.Suffix", "name": "suffix", "k": 3}, ctx)
    assert (m.k, m.max_depth, m.max_cached) == (3, 24, 64)  # conf/method/suffix.yaml's
