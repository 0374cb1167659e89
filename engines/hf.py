"""`engine=hf`: any transformers causal LM, used exactly as transformers defines it.

Trees need no patch: a float 4-D `attention_mask` (0 where a row may attend, the dtype's minimum
elsewhere) plus explicit `position_ids` give each node the logits of decoding its path.
"""

from __future__ import annotations

import inspect
from functools import lru_cache

import torch

from engines.base import Engine, Out, additive
from engines.cache import HFCache


@lru_cache(maxsize=None)
def cache_kwarg(model_cls: type) -> str:
    # transformers 5.24 renamed `past_key_values` to `cache`; accept both spellings.
    params = inspect.signature(model_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class HFEngine(Engine):
    name = "hf"

    def __init__(self, model):
        self.model = model
        self.config = model.config
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.weights = str(self.dtype).removeprefix("torch.")

    def new_cache(self, capacity: int = 0, batch: int = 1) -> HFCache:
        return HFCache()

    def forward(
        self, ids, cache, positions=None, mask=None, logits_to_keep: int = 0, hidden=()
    ) -> Out:
        kw = {
            cache_kwarg(type(self.model)): cache.dc,
            "use_cache": True,
            "logits_to_keep": logits_to_keep,
        }
        if positions is not None:
            kw["position_ids"] = positions
        if mask is not None:
            kw["attention_mask"] = additive(mask, self.dtype)[:, None]
        if hidden:
            kw["output_hidden_states"] = True
        out = self.model(input_ids=ids, **kw)
        hs = {l: out.hidden_states[l] for l in hidden} if hidden else {}
        return Out(out.logits, hs)

    @property
    def embed_weight(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight.detach()

    def output_weight(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight.detach()

    def weight_bytes(self) -> int:
        seen, n = set(), 0
        for t in list(self.model.parameters()) + list(self.model.buffers()):
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                n += t.numel() * t.element_size()
        return n

    def step_weight_bytes(self) -> int:
        """Bytes one decoding step reads: all weights but an untied embedding table (of which
        one row is gathered); a tied table is read whole as the output layer."""
        n = self.weight_bytes()
        if not getattr(self.config, "tie_word_embeddings", False):
            e = self.embed_weight
            n -= e.numel() * e.element_size()
        return n
