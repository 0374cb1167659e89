"""`hf_assisted`: transformers' assisted generation, `generate(assistant_model=draft)`.

The peer of our `draft`, with the same draft model (default `model.draft`): our distilled
format (a reduced-vocabulary head over the target's embeddings, drafters/draftmodel.py) is
rebuilt as the equivalent transformers model (`draftmodel.to_transformers`), any other draft
loads with AutoModelForCausalLM. Knobs: k (`num_assistant_tokens`), schedule
(`num_assistant_tokens_schedule`: constant, k every round like our `draft`, or transformers'
adaptive `heuristic`), confidence (`assistant_confidence_threshold`, transformers' early stop
of a draft; 0 drafts all k tokens like ours).
"""

from __future__ import annotations

from pathlib import Path

from drafters import draftmodel
from groundfloor.errors import UserError
from groundfloor.models import check_same_vocab, load_model, resolve_path
from methods import knobs
from methods.hf_generate import HFGenerate

SCHEDULES = ("constant", "heuristic")


class HFAssisted(HFGenerate):
    name = "hf_assisted"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        knobs.need(
            self,
            0 <= float(cfg.confidence) <= 1,
            "confidence",
            cfg.confidence,
            "use a probability in [0, 1] (0: draft all k tokens)",
        )
        if cfg.schedule not in SCHEDULES:
            raise UserError(
                f"method.schedule={cfg.schedule!r} is not valid; choose one of: "
                f"{', '.join(SCHEDULES)}"
            )
        path = cfg.get("model") or ctx.model_cfg.get("draft")
        if not path:
            raise UserError(
                "method=hf_assisted needs a draft model: set model.draft=<HF id or directory>"
            )
        target = ctx.target.model
        local = Path(resolve_path(str(path)))
        if draftmodel.is_distilled(local):
            self.model = draftmodel.to_transformers(local, target)
        else:
            self.model, tok = load_model(str(path), ctx.device, ctx.target.dtype)
            check_same_vocab(ctx.tokenizer, tok, ctx.target, self.model, str(path))
        self.model.generation_config.num_assistant_tokens = self.k
        self.model.generation_config.num_assistant_tokens_schedule = str(cfg.schedule)
        self.model.generation_config.assistant_confidence_threshold = float(cfg.confidence)

    def generate_kwargs(self) -> dict:
        return {"assistant_model": self.model}

    def assistant(self):
        return self.model

    def static_bytes(self) -> int:
        seen, n = {self.target.embed_weight.data_ptr()}, 0  # shared embeddings are the target's
        for t in list(self.model.parameters()) + list(self.model.buffers()):
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                n += t.numel() * t.element_size()
        return n
