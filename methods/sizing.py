"""Which draft-size policy a method holds, chosen once from its knobs when it is built: k=auto's
(methods.auto: Chooser, TreeChooser, NodeRates) or a fixed k's with the same interface
(methods.auto.fixed). After that no method and no part of the harness asks which it is.

    self.policy = sizing.chain(self)                   # a chain: Chooser or FixedChain(k)
    self.policy = sizing.chain(self, 1, prior)         # a drafter paying one step a token
    self.policy = sizing.pick(self, lambda: TreeChooser(...), lambda k: FixedTree(...))
"""

from __future__ import annotations

from methods import knobs
from methods.auto import AUTO, PRIOR, Chooser, FixedChain


def is_auto(method) -> bool:
    """k=auto (top-level or the method's own): sizes chosen per round."""
    return method.ctx.k(method.cfg) == AUTO


def max_k(method) -> int:
    """k=auto: the longest draft (or the largest tree) a round may choose (method.max_k)."""
    m = method.cfg.get("max_k")
    knobs.need(
        method, isinstance(m, int) and m >= 1, "max_k", m, "use an integer >= 1 (k=auto's longest)"
    )
    return m


def fixed_k(method) -> int:
    """A fixed k (top-level or the method's own), checked: >= 1."""
    k = method.ctx.k(method.cfg)
    valid = "use an integer >= 1 (tokens drafted) or auto"
    knobs.need(method, isinstance(k, int) and k >= 1, "k", k, valid)
    return k


def pick(method, adaptive, fixed):
    """A tree method's policy (or what it sizes by it): `adaptive()` with k=auto, else
    `fixed(k)`, k the method's fixed k (None where unset), each built only when chosen."""
    return adaptive() if is_auto(method) else fixed(method.ctx.k(method.cfg))


def k_or_none(method) -> int | None:
    """The fixed k, or None where the sizes are the policy's (k=auto) or unset: a template
    method's depth cut (None: the whole template)."""
    return pick(method, lambda: None, lambda k: k)


def chain(method, steps_per_token: int = 0, prior=PRIOR):
    """A chain method's policy: with k=auto a Chooser over 1..max_k (its drafter paying
    `steps_per_token` steps a token, its rates starting from `prior`), else FixedChain(k)."""
    if is_auto(method):
        return Chooser(max_k(method), steps_per_token, prior)
    return FixedChain(fixed_k(method))
