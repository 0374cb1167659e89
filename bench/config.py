"""The run-config schema (defaults live here, once) and the checks on its values.

Hydra composes `conf/config.yaml` over this dataclass, so a misspelt top-level key is refused;
`validate` turns bad values into one-line `UserError`s.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from bench.errors import UserError

CONF = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("method", "model", "task", "device", "experiment", "server")
ENGINES = ("auto", "hf", "lean", "openai")
CHECKS = ("none", "distribution")


@dataclass
class RunConfig:
    method: Any = MISSING
    model: Any = MISSING
    task: Any = MISSING
    device: Any = MISSING
    server: Any = None  # engine=openai: conf/server/<name>.yaml
    engine: str = "auto"  # auto | hf | lean (engines/load.py) | openai (bench/serve/)
    k: Optional[int] = None  # draft length; None: the method's own default
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    max_new_tokens: Optional[int] = None  # None: each task's own default
    limit: Optional[int] = None  # prompts per task; None: all
    repeats: int = 2  # timed repeats per prompt, baseline and method interleaved
    seed: int = 0
    warmup: int = 1  # untimed warm-up generations per method
    check: str = "none"  # none | distribution
    dist_samples: int = 200  # continuations per side for check=distribution
    dist_positions: int = 3  # leading positions tested by check=distribution
    tie_tolerance: float = 0.05  # logit gap below which a greedy divergence is a near-tie
    concurrency: int = 1  # engine=openai: conversations in flight
    request_rate: Optional[float] = None  # engine=openai: starts per second; None: unpaced
    num_requests: Optional[int] = None  # engine=openai: conversations per pass; None: prompts
    max_time_s: float = 600.0  # engine=openai: no conversation starts later into a pass
    request_timeout_s: float = 300.0  # engine=openai: a silent request counts as a timeout
    out: str = "results"


def register() -> None:
    ConfigStore.instance().store(name="schema", node=RunConfig)


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def check_overrides(argv: list[str]) -> None:
    """Refuse unknown group options and top-level keys before Hydra prints a multi-line error."""
    known = set(RunConfig.__dataclass_fields__) | set(GROUPS)
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key.startswith("hydra") or "." in key:
            continue
        if key not in known:
            raise UserError(f"unknown setting {key!r}; valid: {', '.join(sorted(known))}")
        if key in GROUPS:
            check_group_values(key, value)


def check_group_values(group: str, value: str) -> None:
    """`value` (one option or a comma-separated sweep) must name files in conf/<group>/."""
    options = group_options(group)
    for v in value.split(","):
        if v and v not in options:
            raise UserError(f"{group}={v!r} is unknown; choose one of: {', '.join(options)}")


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise UserError(msg)


def validate(cfg) -> None:
    _need(cfg.engine in ENGINES,
          f"engine={cfg.engine!r} is not valid; choose one of: {', '.join(ENGINES)}")
    validate_serving(cfg)
    _need(cfg.k is None or cfg.k >= 1, f"k={cfg.k} is not valid; k must be an integer >= 1")
    _need(cfg.temperature >= 0, f"temperature={cfg.temperature} is not valid; use a value >= 0")
    _need(cfg.top_k >= 0, f"top_k={cfg.top_k} is not valid; use 0 (off) or a positive integer")
    _need(0 < cfg.top_p <= 1, f"top_p={cfg.top_p} is not valid; use a value in (0, 1]")
    _need(cfg.max_new_tokens is None or cfg.max_new_tokens >= 1,
          f"max_new_tokens={cfg.max_new_tokens} is not valid; use an integer >= 1")
    _need(cfg.limit is None or cfg.limit >= 1,
          f"limit={cfg.limit} is not valid; use an integer >= 1 (prompts per task)")
    _need(cfg.repeats >= 1, f"repeats={cfg.repeats} is not valid; use an integer >= 1")
    _need(cfg.warmup >= 0, f"warmup={cfg.warmup} is not valid; use an integer >= 0")
    _need(cfg.check in CHECKS, f"check={cfg.check!r} is not valid; choose one of: {', '.join(CHECKS)}")
    _need(cfg.check != "distribution" or cfg.temperature > 0,
          "check=distribution compares sampled outputs: set temperature > 0")
    _need(cfg.dist_samples >= 2, f"dist_samples={cfg.dist_samples} is not valid; use an integer >= 2")
    _need(cfg.dist_positions >= 1,
          f"dist_positions={cfg.dist_positions} is not valid; use an integer >= 1")
    needs = cfg.method.get("engine")
    _need(not needs or cfg.engine in ("auto", needs),
          f"method={cfg.method.name} runs transformers' generate() and needs engine={needs} "
          f"(the transformers model); engine={cfg.engine} has none")
    mk = cfg.method.get("k")
    _need(mk is None or int(mk) >= 0, f"method.k={mk} is not valid; use an integer >= 1")


def validate_serving(cfg) -> None:
    """engine=openai and the `server` group go together; the load knobs must make sense."""
    server = cfg.get("server")
    if cfg.engine != "openai":
        _need(server is None, f"server={server.name if server else server} needs engine=openai "
                              f"(the server backend)")
        return
    _need(server is not None, "engine=openai needs a server: server=" +
          "|".join(group_options("server")))
    _need(cfg.concurrency >= 1, f"concurrency={cfg.concurrency} is not valid; use an integer >= 1")
    _need(cfg.request_rate is None or cfg.request_rate > 0,
          f"request_rate={cfg.request_rate} is not valid; use a value > 0 or null")
    _need(cfg.num_requests is None or cfg.num_requests >= 1,
          f"num_requests={cfg.num_requests} is not valid; use an integer >= 1 or null")
    _need(cfg.max_time_s > 0, f"max_time_s={cfg.max_time_s} is not valid; use a value > 0")
    _need(cfg.request_timeout_s > 0,
          f"request_timeout_s={cfg.request_timeout_s} is not valid; use a value > 0")
    _need(server.api in ("chat", "completions"),
          f"server.api={server.api!r} is not valid; choose one of: chat, completions")
    _need(server.metrics in ("vllm", "sglang", "none"),
          f"server.metrics={server.metrics!r} is not valid; choose one of: vllm, sglang, none")
    _need(str(server.host) in ("127.0.0.1", "localhost", "::1"),
          f"server.host={server.host!r}: the suite starts its server on this machine; use "
          f"127.0.0.1")
    _need(cfg.check == "none", "check=distribution needs the target's logits: not on engine=openai")
