"""What `hf_pld` and `hf_assisted` share: transformers' own `generate()` as the method.

These are in-run peers, not our implementations: transformers decodes the whole turn with its
own candidate generator, verification and acceptance, and `bench.decode.wholeturn` drives it
under our clock, budget, EOS ids and verdict. A subclass names the `generate()` arguments of its
mode and, if it drafts with a model, that model (`assistant`), whose forwards the clock counts
as `draft`. They need the transformers model itself, so they run on engine=hf only (engine=auto
picks hf for them; `bench.run.config.validate` refuses engine=lean in one line).
"""

from __future__ import annotations

from groundfloor.errors import UserError
from methods import knobs, sizing
from methods.auto import FixedChain
from methods.base import Method

ENGINE = "hf"  # the only engine these methods run on (bench.run.config.validate)


class HFGenerate(Method):
    whole_turn = True  # bench.decode.loop hands the turn to bench.decode.wholeturn.generate_whole
    baseline = "hf_ar"  # transformers' plain generate() under the same hooks, not our loop

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        if ctx.target.name != ENGINE or not hasattr(ctx.target, "model"):
            raise UserError(
                f"method={cfg.name} runs transformers' generate() and needs "
                f"engine=hf (the transformers model); engine={ctx.target.name} has none"
            )
        self.k = self.draft_length()

    def draft_length(self) -> int:
        """Its own fixed setting: transformers' modes run as shipped, k=auto keeps the YAML's k."""
        k = sizing.pick(self, lambda: self.cfg.get("k"), lambda _: sizing.fixed_k(self))
        knobs.need(self, isinstance(k, int) and k >= 1, "k", k, "use an integer >= 1")
        self.policy = FixedChain(k)
        return k

    def generate_kwargs(self) -> dict:
        """The `generate()` arguments that select this speculative mode."""
        raise NotImplementedError

    def assistant(self):
        """The transformers model that drafts (its forwards are the draft phase), or None."""
        return None
