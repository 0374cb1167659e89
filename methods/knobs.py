"""A method's knobs as typed fields, read from its own YAML (the one place their defaults live).

    @dataclass(frozen=True)
    class SuffixKnobs:
        max_depth: int
        min_token_prob: float
    kn = read(cfg, SuffixKnobs)   # cfg: conf/method/suffix.yaml with the run's overrides

A field has a type and no default: a knob missing from the node is a bug in its YAML, and a value
of the wrong type is refused in one line naming the knob, the value and the type it needs.
`X | None` allows null; `object` takes any value (a tree given as a list of paths).
"""

from __future__ import annotations

import dataclasses
import types
import typing

from omegaconf import OmegaConf

from groundfloor.errors import UserError

WORDS = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    dict: "a mapping",
    list: "a list",
}


def _plain(value):
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def _cast(value, kind, where: str):
    if kind is object:
        return value
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for a in inner:
            try:
                return _cast(value, a, where)
            except UserError as e:
                errors.append(e)
        raise errors[0]
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
        dict: isinstance(value, dict),
        list: isinstance(value, list),
    }.get(kind)
    if ok is None:
        raise TypeError(f"{where}: knob type {kind!r} is not one methods.knobs reads")
    if not ok:
        raise UserError(f"{where}={value!r} is not valid; it takes {WORDS[kind]}")
    return float(value) if kind is float else value


def read(cfg, schema):
    """The fields of `schema` (a dataclass) from the method node `cfg`, type-checked."""
    name = cfg.get("name") or "?"
    hints = typing.get_type_hints(schema)
    values = {}
    for f in dataclasses.fields(schema):
        if f.name not in cfg:
            raise UserError(
                f"method={name}: knob {f.name!r} is missing from its config; conf/method/"
                f"{name}.yaml holds every default (build it with methods.registry.build_method)"
            )
        values[f.name] = _cast(_plain(cfg[f.name]), hints[f.name], f"method.{f.name}")
    return schema(**values)


def need(method, ok: bool, knob: str, value, valid: str) -> None:
    """One clear line for a bad knob of `method`: the knob, its value, what would be valid."""
    if not ok:
        raise UserError(f"method.{knob}={value!r} is not valid for {method.name}; {valid}")
