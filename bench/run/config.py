"""The run-config schema (defaults live here, once) and the checks on its values.

Hydra composes `conf/config.yaml` over this dataclass, so a misspelt top-level key is refused;
`validate` turns bad values into one-line `UserError`s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from groundfloor.errors import UserError
from groundfloor.paths import CONF, check_group_values, group_options

GROUPS = ("method", "model", "task", "device", "experiment", "server")
ENGINES = ("auto", "hf", "lean", "openai")  # openai: the old name of backend=server
BACKENDS = ("local", "server")
CHECKS = ("none", "distribution")


@dataclass
class RunConfig:
    method: Any = MISSING
    model: Any = MISSING
    task: Any = MISSING
    device: Any = MISSING
    server: Any = None  # backend=server: conf/server/<name>.yaml
    backend: str = "local"  # local: our engines in this process | server: a server the suite starts
    engine: str = "auto"  # backend=local: auto (lean where supported, else hf) | hf | lean
    k: Any = None  # draft length: an integer, or auto (per round, methods.auto); None: method.k
    drafter_weights: str = (
        "auto"  # learned drafters' layers: auto (int8 where timed faster) | float | int8
    )
    temperature: float = 0.0  # 0: greedy, outputs checked token by token against the baseline
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    max_new_tokens: Optional[int] = None  # None: each task's own default
    limit: Optional[int] = None  # prompts per task; None: all
    limit_per_category: Optional[int] = None  # the first N prompts of each category
    repeats: int = 2  # timed repeats per prompt, baseline and method interleaved
    seed: int = 0
    warmup: int = 1  # untimed warm-up generations per method before the clock starts
    remeasure: int = 3  # extra interleaved pairs for a prompt × turn disturbed by other work
    disturb_ratio: float = 1.25  # a side's repeats may differ by this factor before "disturbed"
    disturb_others: float = 0.25  # share of the machine other work (or steal) may take in a turn
    check: str = "none"  # none | distribution (T > 0: two-sample test against the baseline)
    dist_samples: int = 200  # continuations per side for check=distribution
    dist_positions: int = 3  # leading positions tested by check=distribution
    dist_forced: bool = True  # check=distribution also draws with every round's draft rejected
    tie_tolerance: float = 0.05  # logit gap under which a greedy divergence is a near-tie
    # a run directory holding this cell, measured by this code: skip it if complete, else
    # continue (other code or another cell: refused, bench.run.cells)
    resume: bool = True
    batch: int = 1  # backend=local: conversations decoded together, one target forward a round
    concurrency: int = 1  # backend=server: conversations in flight at once
    request_rate: Optional[float] = (
        None  # backend=server: starts per second (Poisson); None: unpaced
    )
    num_requests: Optional[int] = (
        None  # backend=server: conversations per pass; None: each prompt once
    )
    max_time_s: float = 600.0  # backend=server: no conversation starts later into a pass
    request_timeout_s: float = 300.0  # backend=server: a silent request counts as a timeout
    out: str = MISSING  # conf/config.yaml: results/<time>_<method> (a sweep: results/sweep_<hash>)


def sweep_id(argv: list[str] | None = None) -> str:
    """A short hash of a command's overrides (Hydra's own and flags left out): a sweep started
    again with the same command lands in the same folder and resumes (bench.run.cells)."""
    import hashlib
    import sys

    args = sorted(
        a
        for a in (sys.argv[1:] if argv is None else argv)
        if "=" in a and not a.lstrip("+~").startswith("hydra")
    )
    return hashlib.sha256("\n".join(args).encode()).hexdigest()[:10]


def register() -> None:
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="schema", node=RunConfig)
    if not OmegaConf.has_resolver("sweep_id"):
        OmegaConf.register_new_resolver("sweep_id", lambda: sweep_id())


def compose(overrides: list[str], what: str = "overrides"):
    """The run config `python -m bench OVERRIDES` would build, for commands that run cells
    themselves (the gate, the GPU check); a bad override is one UserError naming `what`."""
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    register()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hcompose("config", overrides=overrides)
    except HydraException as e:
        raise UserError(f"{what} {overrides}: {str(e).splitlines()[0]}")


KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def parse_as(kind: type, text: str):
    """Hydra's reading of one override value as `kind`; ValueError when it is not one."""
    t = text.strip()
    if t.lower() in ("null", "none", "~"):
        return None
    if kind is bool:
        if t.lower() not in ("true", "false"):
            raise ValueError(text)
        return t.lower() == "true"
    if kind is int:
        return int(t)
    if kind is float:
        return float(t)
    return t


def field_kind(name: str):
    """The Python type of a RunConfig field (Optional unwrapped); None for config groups."""
    import typing

    f = RunConfig.__dataclass_fields__.get(name)
    if f is None or f.type is Any or name in GROUPS:
        return None
    tp = eval(f.type, vars(typing)) if isinstance(f.type, str) else f.type
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if args else tp


def sweep_values(value: str) -> list[str]:
    """The values of a sweep override `a,b,c`, or the one value (brackets and ranges as is)."""
    if value.startswith(("[", "{", "range(", "choice(", "interval(")):
        return []
    return value.split(",")


def check_overrides(argv: list[str]) -> None:
    """Refuse unknown group options, top-level keys, values of the wrong type and unknown
    method knobs before Hydra prints a multi-line error."""
    known = set(RunConfig.__dataclass_fields__) | set(GROUPS)
    methods = swept_methods(argv)
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key.startswith("hydra"):
            continue
        if key.startswith("method."):
            check_method_knob(methods, key.split(".", 1)[1], value)
            continue
        if "." in key:
            continue
        if key not in known:
            raise UserError(f"unknown setting {key!r}; valid: {', '.join(sorted(known))}")
        if key in GROUPS:
            check_group_values(key, value)
            continue
        kind = int if key == "k" else field_kind(key)
        for v in sweep_values(value):
            if key == "k" and v.strip() == "auto":
                continue
            try:
                parse_as(kind, v)
            except ValueError:
                words = KINDS[kind] + (" or auto" if key == "k" else "")
                raise UserError(f"{key}={v!r} is not valid; {key} takes {words}")


def default_method() -> str:
    """The method conf/config.yaml's defaults list composes when no method= is given."""
    import yaml

    defaults = yaml.safe_load((CONF / "config.yaml").read_text())["defaults"]
    return next(d["method"] for d in defaults if isinstance(d, dict) and "method" in d)


def swept_methods(argv: list[str]) -> list[str]:
    """The methods a command runs: its method= values (a sweep's list), else the default."""
    methods = [default_method()]
    for arg in argv:
        if arg.startswith("method="):
            methods = arg.split("=", 1)[1].split(",")
    return methods


def method_knob_overrides(argv: list[str]) -> list[str]:
    """`method.<knob>=v` as `++method.<knob>=v` where the default method's YAML lacks the knob.

    A multirun composes the config once with the sweep's own overrides left out, the default
    method in its place, before any job: `-m method=eagle,eagle3 method.top_k=1` then failed
    with Hydra's "Key 'top_k' is not in struct" (ngram has no top_k), though both swept methods
    have it. `++` sets the knob whether or not the node holds it; check_method_knob has already
    refused a knob some swept method lacks, in one line, so no job gets a knob its method does
    not read. Knobs the default has stay as written (a sweep's folder hash reads the argv)."""
    own = method_defaults(default_method())
    out = []
    for arg in argv:
        key = arg.split("=", 1)[0]
        if "=" in arg and key.startswith("method.") and key[7:].split(".")[0] not in own:
            arg = "++" + arg
        out.append(arg)
    return out


def method_defaults(name: str) -> dict:
    import yaml

    path = CONF / "method" / f"{name}.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def check_method_knob(methods: list[str], knob: str, value: str) -> None:
    """method.<knob>=value: a knob the method's YAML has, of its default's type."""
    for m in methods:
        defaults = method_defaults(m)
        if not defaults:
            continue
        top = knob.split(".", 1)[0]
        if top not in defaults or top.startswith("_"):
            valid = ", ".join(k for k in defaults if not k.startswith("_") and k != "name")
            raise UserError(f"method.{knob}: {m} has no knob {top!r}; its knobs: {valid}")
        default = defaults[top]
        kind = (
            type(default)
            if isinstance(default, (bool, int, float))
            else NULLABLE_INT.get(top)
            if default is None or default == "auto"
            else None
        )
        if kind is None:
            continue
        for v in sweep_values(value):
            try:
                parse_as(kind, v)
            except ValueError:
                if kind is not bool and v.strip() in ("auto",) and top in AUTO_KNOBS:
                    continue
                raise UserError(
                    f"method.{knob}={v!r} is not valid for {m}; it takes "
                    f"{KINDS[kind]} (default {default})"
                )


AUTO_KNOBS = ("total_tokens", "tree", "k")
NULLABLE_INT = {"k": int, "num_heads": int, "draft_vocab": int, "total_tokens": int}


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise UserError(msg)


def validate(cfg) -> None:
    _need(
        cfg.engine in ENGINES,
        f"engine={cfg.engine!r} is not valid; choose one of: {', '.join(ENGINES)} (openai: the "
        f"old name of backend=server)",
    )
    validate_serving(cfg)
    _validate_model(cfg)
    _validate_decoding(cfg)
    _validate_measuring(cfg)
    _validate_method(cfg)


def _validate_model(cfg) -> None:
    """Every model.* value set (model.target named where it is missing)."""
    from omegaconf import OmegaConf

    for group in ("model",):
        for key in cfg[group]:
            _need(
                not OmegaConf.is_missing(cfg[group], key),
                f"{group}={cfg[group].get('name')} needs {group}.{key}=... (e.g. model.target="
                f"<Hugging Face id or directory>)"
                if key == "target"
                else f"{group}.{key} must be set",
            )


def _validate_decoding(cfg) -> None:
    """k, the sampling settings, the token budget, the prompt counts and truncation."""
    _need(
        cfg.k is None or cfg.k == "auto" or (isinstance(cfg.k, int) and cfg.k >= 1),
        f"k={cfg.k!r} is not valid; use an integer >= 1 or auto (chosen per round)",
    )
    _need(cfg.temperature >= 0, f"temperature={cfg.temperature} is not valid; use a value >= 0")
    _need(cfg.top_k >= 0, f"top_k={cfg.top_k} is not valid; use 0 (off) or a positive integer")
    _need(0 < cfg.top_p <= 1, f"top_p={cfg.top_p} is not valid; use a value in (0, 1]")
    _need(
        cfg.max_new_tokens is None or cfg.max_new_tokens >= 1,
        f"max_new_tokens={cfg.max_new_tokens} is not valid; use an integer >= 1",
    )
    _need(
        cfg.limit is None or cfg.limit >= 1,
        f"limit={cfg.limit} is not valid; use an integer >= 1 (prompts per task)",
    )
    _need(
        cfg.limit_per_category is None or cfg.limit_per_category >= 1,
        f"limit_per_category={cfg.limit_per_category} is not valid; use an integer >= 1",
    )
    trunc = cfg.task.get("truncate")
    _need(
        trunc in (None, "left", "right"),
        f"task.truncate={trunc!r} is not valid; choose left, right or null (refuse long prompts)",
    )


def _validate_measuring(cfg) -> None:
    """Repeats, warm-up, re-measuring, interference thresholds, the checks, drafter weights."""
    _need(cfg.repeats >= 1, f"repeats={cfg.repeats} is not valid; use an integer >= 1")
    _need(cfg.warmup >= 0, f"warmup={cfg.warmup} is not valid; use an integer >= 0")
    _need(cfg.remeasure >= 0, f"remeasure={cfg.remeasure} is not valid; use an integer >= 0")
    _need(
        cfg.disturb_ratio > 1, f"disturb_ratio={cfg.disturb_ratio} is not valid; use a factor > 1"
    )
    _need(
        0 < cfg.disturb_others <= 1,
        f"disturb_others={cfg.disturb_others} is not valid; use a share of the machine in (0, 1]",
    )
    _need(
        cfg.check in CHECKS, f"check={cfg.check!r} is not valid; choose one of: {', '.join(CHECKS)}"
    )
    from drafters.weights import check as check_drafter_weights  # cost: torch (1.7 s) for one check

    check_drafter_weights(cfg.drafter_weights)
    _need(
        cfg.check != "distribution" or cfg.temperature > 0,
        "check=distribution compares sampled outputs: set temperature > 0",
    )
    _need(
        cfg.dist_samples >= 2, f"dist_samples={cfg.dist_samples} is not valid; use an integer >= 2"
    )
    _need(
        cfg.dist_positions >= 1,
        f"dist_positions={cfg.dist_positions} is not valid; use an integer >= 1",
    )


def _validate_method(cfg) -> None:
    """What the method needs of the engine, and its own k."""
    needs = cfg.method.get("engine")
    _need(
        not needs or cfg.engine in ("auto", needs),
        f"method={cfg.method.name} runs transformers' generate() and needs engine={needs} "
        f"(the transformers model); engine={cfg.engine} has none",
    )
    mk = cfg.method.get("k")
    _need(
        mk is None or mk == "auto" or (isinstance(mk, int) and mk >= 0),
        f"method.k={mk!r} is not valid; use an integer >= 1 or auto (chosen per round)",
    )
    _need(cfg.batch >= 1, f"batch={cfg.batch} is not valid; use an integer >= 1")
    _need(
        cfg.batch == 1 or backend(cfg) != "server",
        f"batch={cfg.batch} batches the in-process engine; a server's load is concurrency=",
    )
    _need(
        cfg.batch == 1 or not needs,
        f"batch={cfg.batch}: method={cfg.method.name} runs transformers' generate() a turn at a "
        f"time; batch the in-process methods, or use backend=server with concurrency=",
    )
    _need(
        cfg.batch == 1 or cfg.check != "distribution",
        f"batch={cfg.batch} with check=distribution: the distribution check samples one "
        f"sequence at a time; run it at batch=1",
    )


def backend(cfg) -> str:
    """local | server; `engine=openai` is the old spelling of backend=server."""
    return "server" if cfg.engine == "openai" else str(cfg.get("backend", "local"))


def backend_words(cfg) -> str:
    """How the user asked for the server backend, for the messages that name it."""
    return "engine=openai" if cfg.engine == "openai" else "backend=server"


ALIAS_NOTE = (
    "note: engine=openai is now backend=server (engine= names the in-process engine: "
    "auto, hf, lean)"
)


def validate_serving(cfg) -> None:
    """backend=server and the `server` group go together; the load knobs must make sense."""
    server = cfg.get("server")
    _need(
        cfg.get("backend", "local") in BACKENDS,
        f"backend={cfg.get('backend')!r} is not valid; choose one of: {', '.join(BACKENDS)}",
    )
    if backend(cfg) != "server":
        _need(
            server is None,
            f"server={server.name if server else server} needs engine=openai, i.e. "
            f"backend=server (the server backend)",
        )
        return
    _need(
        server is not None,
        f"{backend_words(cfg)} needs a server: server=" + "|".join(group_options("server")),
    )
    _need(cfg.concurrency >= 1, f"concurrency={cfg.concurrency} is not valid; use an integer >= 1")
    _need(
        cfg.request_rate is None or cfg.request_rate > 0,
        f"request_rate={cfg.request_rate} is not valid; use a value > 0 or null",
    )
    _need(
        cfg.num_requests is None or cfg.num_requests >= 1,
        f"num_requests={cfg.num_requests} is not valid; use an integer >= 1 or null",
    )
    _need(cfg.max_time_s > 0, f"max_time_s={cfg.max_time_s} is not valid; use a value > 0")
    _need(
        cfg.request_timeout_s > 0,
        f"request_timeout_s={cfg.request_timeout_s} is not valid; use a value > 0",
    )
    _need(
        server.api in ("chat", "completions"),
        f"server.api={server.api!r} is not valid; choose one of: chat, completions",
    )
    _need(
        server.metrics in ("vllm", "sglang", "none"),
        f"server.metrics={server.metrics!r} is not valid; choose one of: vllm, sglang, none",
    )
    _need(
        str(server.host) in ("127.0.0.1", "localhost", "::1"),
        f"server.host={server.host!r}: the suite starts its server on this machine; use 127.0.0.1",
    )
    _need(
        cfg.check == "none",
        f"check=distribution needs the target's logits: not on {backend_words(cfg)}",
    )
