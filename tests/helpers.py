"""The tests' shared helpers: one method loader, one Context, prompts, and random drafters.

    ctx = make_ctx(target, k)           # target: an engine or a transformers model
    m = method("eagle3", ctx, heads=d)  # conf/method/eagle3.yaml with the tests' knobs
    res = run(m, prompt_ids)            # greedy, 40 new tokens
The `target` fixture (conftest.py) is parametrised over the engines.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import torch
from conftest import ROOT
from omegaconf import OmegaConf

from bench.decode.loop import generate
from drafters import eagle as eagle_io
from drafters import medusa as heads_io
from engines.load import wrap
from groundfloor.clock import Clock
from groundfloor.paths import group_options
from groundfloor.sampling import SamplingParams
from methods.registry import Context, build_method, method_config, method_tests

GREEDY = SamplingParams()


def make_ctx(target, k=None):
    """target: an engine, or a transformers model (run on engine=hf)."""
    if isinstance(target, torch.nn.Module):
        target = wrap(target, "hf")
    return Context(
        target=target,
        tokenizer=None,
        device=torch.device("cpu"),
        dtype=target.dtype,
        model_cfg=OmegaConf.create({"draft": None}),
        k_override=k,
    )


def tiny_knobs(name) -> dict:
    """The knobs a method takes on the tests' tiny models: its YAML's `_test.tiny`."""
    return method_tests(name).get("tiny") or {}


def method(name, ctx, **kw):
    """conf/method/<name>.yaml with the tests' knobs: the one method loader of the tests."""
    return build_method(method_config(name, {**tiny_knobs(name), **kw}), ctx)


def run(m, prompt, n=40, eos=frozenset()):
    return generate(m, prompt, n, GREEDY, set(eos), Clock(torch.device("cpu")))


def prompts(count, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        n = int(torch.randint(3, 30, (1,), generator=g))
        out.append(torch.randint(4, 128, (n,), generator=g).tolist())
    return out


def random_head(target, kind, seed=0, vocab=None):
    torch.manual_seed(seed)
    cfg = eagle_io.head_config(target.config, kind)
    d2t = None
    if kind == "eagle3":
        d2t = torch.randperm(target.config.vocab_size)[: vocab or 64].sort().values
    layers = eagle_io.default_layers(kind, target.config.num_hidden_layers)
    head = eagle_io.EagleHead(cfg, kind, layers, d2t)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return head.attach(target).eval()


def save_head(target, kind, path, seed=0):
    eagle_io.save(random_head(target, kind, seed), path, "tiny", dtype=torch.float32)
    return path


def eagle_method(target, kind, path, drafter_weights="float", **kw):
    node = {
        "_target_": f"methods.{kind}.{'Eagle' if kind == 'eagle' else 'Eagle3'}",
        "name": kind,
        "k": 4,
        "heads": str(path),
        "top_k": 3,
        "total_tokens": 10,
        "budget_ratio": 1.5,
        **kw,
    }
    ctx = dataclasses.replace(make_ctx(target), drafter_weights=drafter_weights)
    return build_method(OmegaConf.create(node), ctx)


def random_heads(hidden, n, seed):
    torch.manual_seed(seed)
    h = heads_io.MedusaHeads(hidden, n, 1)
    for blk in h.blocks:
        torch.nn.init.normal_(blk[0].linear.weight, std=0.3)
    return h


# the learned drafters, one a conf/drafter/*.yaml (its method and its model-config key share its
# name): conftest's `env` holds a random one of each, so a new drafter is built with no edit here
DRAFTERS = tuple(group_options("drafter"))


def build(env, name, knobs, drafters=True, target=None):
    """conf/method/<name>.yaml with `knobs` over it, on the engine it needs (conftest's `env`)
    or on `target` (a seat of it); the model config names the test's drafters (or,
    drafters=False, none of them)."""
    ctx = make_ctx(env[engine_of(name)])
    ctx.target = target or ctx.target
    ctx.model_cfg = OmegaConf.create({d: str(env[d]) if drafters else None for d in DRAFTERS})
    return build_method(method_config(name, knobs), ctx)


def engine_of(name) -> str:
    """The engine a method runs on in the tests: its YAML's `engine` (transformers' generate()
    peers: hf), else lean."""
    return str(method_config(name).get("engine") or "lean")


# --- the command line and run configurations the tests share ---
ENV = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")  # a subprocess run: offline


def bench(*args, cwd=ROOT):
    """`python -m bench ARGS` in a subprocess, as a user runs it (its exit code and output)."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )


def tiny_overrides(target, out, limit: int, tokens: int, repeats: int, *extra) -> list[str]:
    """A run of the tiny model on `limit` code prompts, `tokens` new tokens, `repeats` repeats:
    the overrides every tiny run below shares, then `extra`."""
    return [
        "model=hf",
        f"model.target={target}",
        "model.dtype=float32",
        "device=cpu",
        "task=code",
        f"limit={limit}",
        f"max_new_tokens={tokens}",
        f"repeats={repeats}",
        "remeasure=0",
        f"out={out}",
        *extra,
    ]


def tiny_args(target, out, *extra):
    """A short run on the tiny model: two code prompts, 12 tokens, two repeats."""
    return tiny_overrides(target, out, 2, 12, 2, "warmup=1", *extra)


def tiny_run(target, out, *extra):
    """check=distribution at T = 1: one code prompt of the tiny model, 200 samples, 3 positions."""
    dist = ["warmup=0", "temperature=1", "top_k=8", "check=distribution", "dist_samples=200"]
    return tiny_overrides(target, out, 1, 8, 1, *dist, "dist_positions=3", *extra)


TINY_DISTILL = {  # training on the tiny model: float32 on torch's kernels, seeded
    "engine": "lean",
    "weights": "float32",
    "dtype": "float32",
    "kernel": "aten",
    "device": "cpu",
    "seed": 0,
}


def as_data(x):
    """A policy's state as plain values (an object by its fields), so two states compare."""
    if isinstance(x, dict):
        return {str(k): as_data(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [as_data(v) for v in x]
    if hasattr(x, "__dict__"):
        return {"class": type(x).__name__, **as_data(vars(x))}
    return x


def run_args(target, out, *extra):
    """A one-repeat run on the tiny model: two code prompts, 12 tokens."""
    return tiny_overrides(target, out, 2, 12, 1, *extra)
