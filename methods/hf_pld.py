"""`hf_pld`: transformers' prompt lookup decoding, `generate(prompt_lookup_num_tokens=k)`.

The peer of our `ngram`: the same idea (copy the continuation of the latest matching n-gram of
prompt + output) in transformers' own implementation, run whole by `bench.wholeturn`.
Knobs: k (`prompt_lookup_num_tokens`), max_n (`max_matching_ngram_size`). Its lookup runs
between forwards, so its time is in the `other` phase (ours is in `draft`).
"""
from __future__ import annotations

from methods.hf_generate import HFGenerate


class HFPromptLookup(HFGenerate):
    name = "hf_pld"

    def generate_kwargs(self) -> dict:
        return {"prompt_lookup_num_tokens": self.k,
                "max_matching_ngram_size": int(self.cfg.max_n)}
