"""`hf_ar`: transformers' own plain `generate()` (no speculation), the baseline of `hf_pld` and
`hf_assisted`.

Those two are transformers' speculative modes, decoded inside `generate()`; against our own loop
their speedup would mix speculation with the difference between two decoding loops. So their
runs interleave this instead: the same `generate()`, the same hooks and clock
(`bench.decode.wholeturn`), with no candidate generator. Every other method's baseline is `ar`.
"""

from __future__ import annotations

from methods.hf_generate import HFGenerate


class HFPlain(HFGenerate):
    name = "hf_ar"

    def draft_length(self) -> int:
        return 0  # drafts nothing

    def generate_kwargs(self) -> dict:
        return {}
