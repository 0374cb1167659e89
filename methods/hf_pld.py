"""`hf_pld`: transformers' prompt lookup decoding, `generate(prompt_lookup_num_tokens=k)`.

The peer of our `ngram`: the same idea (copy the continuation of the latest matching n-gram of
prompt + output) in transformers' own implementation, run whole by `bench.decode.wholeturn`.
Knobs: k (`prompt_lookup_num_tokens`), max_n (`max_matching_ngram_size`). Its lookup runs
between forwards, so its time is in the `other` phase (ours is in `draft`).
"""

from __future__ import annotations

from methods import knobs
from methods.hf_generate import HFGenerate


class HFPromptLookup(HFGenerate):
    name = "hf_pld"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        knobs.need(
            self,
            int(cfg.max_n) >= 1,
            "max_n",
            cfg.max_n,
            "use an integer >= 1 (the longest n-gram matched)",
        )

    def generate_kwargs(self) -> dict:
        return {"prompt_lookup_num_tokens": self.k, "max_matching_ngram_size": int(self.cfg.max_n)}
