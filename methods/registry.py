"""What a method is built from: its YAML in conf/method/, the run's Context, one loader for all.

    method_config("eagle3")              # conf/method/eagle3.yaml as an OmegaConf node
    build_method(cfg_or_name, ctx)       # the class its `_target_` names, with (cfg, ctx)
    build_method("ar", ctx)              # the baseline, from conf/method/ar.yaml
    is_bound("oracle")                   # True: a bound to compare against, not a method

The runner, SAM's trained fallback, the knob checks and the tests all load methods here, so a
method's defaults are written once, in its YAML.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf

from groundfloor.errors import UserError
from groundfloor.paths import CONF


@dataclass
class Context:
    """What a method may use: the target engine, its tokenizer, device, dtype, model config."""

    target: object  # engines.base.Engine
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    model_cfg: DictConfig
    k_override: int | str | None = None  # top-level k: an integer or "auto"
    eos: frozenset = frozenset()  # ids that end a turn
    # learned drafters' linear layers (drafters.weights): a run passes its `drafter_weights`
    # (auto by default); built by hand, a drafter keeps its stored values
    drafter_weights: str = "float"

    def k(self, method_cfg) -> int | str | None:
        """The draft length: top-level `k` when given, else the method's own default (which a
        tree method may leave None: its tree's own depth); "auto": chosen per round
        (methods.auto)."""
        k = self.k_override if self.k_override is not None else method_cfg.get("k")
        if k is None or k == "auto":
            return k
        if isinstance(k, str) and not k.strip().lstrip("-").isdigit():
            raise UserError(f"k={k!r} is not valid; use an integer >= 1 or auto")
        return int(k)


def method_names() -> list[str]:
    return sorted(p.stem for p in (CONF / "method").glob("*.yaml"))


@functools.cache
def is_bound(name: str) -> bool:
    """Whether method `name` is a bound to compare against (its class's `bound`: oracle), not a
    method to deploy; False for names not in conf/method/ (a server's, an older run's)."""
    from hydra.utils import get_class

    if name not in method_names():
        return False
    return bool(getattr(get_class(method_config(name)._target_), "bound", False))


def method_config(name: str, overrides=None) -> DictConfig:
    """conf/method/<name>.yaml (merged with `overrides`), as Hydra would compose it."""
    path = CONF / "method" / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"method={name!r} is unknown; choose one of: {', '.join(method_names())}")
    node = OmegaConf.load(path)
    return OmegaConf.merge(node, overrides) if overrides else node


def method_tests(name: str) -> dict:
    """conf/method/<name>.yaml's `_test` block, which a run never reads: the method's bad-knob
    cases (`bad`), the knobs no value of their type makes wrong (`any_value`) and its knobs on
    tiny random models (`tiny`), for the tests and gpu-check's tiny target."""
    node = method_config(name).get("_test")
    return OmegaConf.to_container(node) if node is not None else {}


def build_method(method_cfg, ctx: Context):
    """Instantiate the class a method config names in `_target_` with (its config, ctx); a
    name loads conf/method/<name>.yaml, and a node naming a shipped method is merged over its
    YAML, so every knob a method reads (methods.knobs) has its one default there."""
    from hydra.utils import get_class

    if isinstance(method_cfg, str):
        method_cfg = method_config(method_cfg)
    method_cfg = OmegaConf.create(method_cfg) if isinstance(method_cfg, dict) else method_cfg
    name = method_cfg.get("name")
    if name in method_names():  # a partial node (a test, SAM's fallback): over its own YAML
        method_cfg = OmegaConf.merge(method_config(str(name)), method_cfg)
    try:
        cls = get_class(method_cfg._target_)
    except Exception as e:  # a YAML naming a class that does not import
        raise UserError(
            f"method {method_cfg.get('name')!r}: cannot import {method_cfg.get('_target_')!r} ({e})"
        )
    return cls(method_cfg, ctx)
