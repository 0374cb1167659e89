"""The distilled draft model: a few transformer layers over the target's own embeddings, and a
reduced-vocabulary head.

    embeddings  shared with the target (not stored; V × H)
    layers      `num_layers` LlamaDecoderLayers (transformers' LlamaModel, used as is),
                initialised from the target's first layers
    head        (V_d, H) over the V_d most frequent tokens of the distillation answers;
                `d2t[i]` is the target id of draft token i (EAGLE-3's convention)
`forward` returns logits over the draft vocabulary; `methods.draft` maps them to target ids
through `d2t`. At run time the draft runs on the target's engine kind (`load_engine`): a lean
model built from the same tensors, or this module behind engines.hf. Stored files:
config.json (the LlamaConfig), model.safetensors (layers, norm, head, d2t) and
specsweep_draft.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from drafters import storage
from drafters.weights import int8_kernel
from engines import build
from engines.hf import HFEngine, cache_kwarg
from engines.lean import LeanEngine

MARKER = "specsweep_draft.json"


@dataclass
class DraftOutput:
    logits: torch.Tensor
    hidden_states: tuple | None = None


class DistilledDraft(nn.Module):
    def __init__(self, config, embed: torch.Tensor, d2t: torch.Tensor):
        super().__init__()
        from transformers import LlamaModel

        self.config = config
        self.model = LlamaModel(config)
        del self.model.embed_tokens  # the target's embeddings are passed in, never copied
        # (V, H), frozen, shared with the target (same storage), never saved
        self.register_buffer("embed", embed.detach(), persistent=False)
        self.register_buffer("d2t", d2t.long())
        self.head = nn.Linear(config.hidden_size, d2t.numel(), bias=False)
        self.vocab = embed.shape[0]

    def forward(
        self,
        input_ids,
        cache=None,
        use_cache=True,
        logits_to_keep=0,
        position_ids=None,
        attention_mask=None,
        output_hidden_states=False,
        **_,
    ):
        h = nn.functional.embedding(input_ids, self.embed)
        kw = {cache_kwarg(type(self.model)): cache}
        out = self.model(
            inputs_embeds=h,
            use_cache=use_cache,
            position_ids=position_ids,
            attention_mask=attention_mask,
            **kw,
        )
        x = out.last_hidden_state
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        return DraftOutput(logits=self.head(x))  # (1, n, V_d)

    def get_input_embeddings(self):
        from types import SimpleNamespace

        return SimpleNamespace(weight=self.embed)

    def small_logits(self, input_ids, attention_mask=None) -> torch.Tensor:
        """Training view: (B, L, V_d) logits without scattering to the full vocabulary."""
        h = nn.functional.embedding(input_ids, self.embed)
        return self.head(
            self.model(
                inputs_embeds=h, attention_mask=attention_mask, use_cache=False
            ).last_hidden_state
        )


def from_target(target, num_layers: int, d2t: torch.Tensor) -> DistilledDraft:
    """A draft initialised from the target's first layers, final norm and LM-head rows."""
    import copy

    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = num_layers
    if hasattr(cfg, "layer_types") and cfg.layer_types:
        cfg.layer_types = cfg.layer_types[:num_layers]
    draft = DistilledDraft(cfg, target.get_input_embeddings().weight.detach(), d2t)
    for i in range(num_layers):
        draft.model.layers[i].load_state_dict(target.model.layers[i].state_dict())
    draft.model.norm.load_state_dict(target.model.norm.state_dict())
    draft.head.weight.data.copy_(target.get_output_embeddings().weight.detach()[d2t])
    return draft.float()


def save(
    draft: DistilledDraft, out: Path, base: str, dtype=torch.bfloat16, extra=None, int8=()
) -> None:
    """`int8` names matrices stored in int8 (drafters.storage)."""
    out.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.detach().to(dtype if v.is_floating_point() else v.dtype).contiguous()
        for k, v in draft.state_dict().items()
    }
    storage.write(state, out / "model.safetensors", int8)
    draft.config.save_pretrained(out)
    meta = {
        "base_model_name_or_path": base,
        "draft_vocab_size": int(draft.d2t.numel()),
        "num_layers": draft.config.num_hidden_layers,
        "shares_target_embeddings": True,
    }
    meta.update(extra or {})
    (out / MARKER).write_text(json.dumps(meta, indent=2))


def is_distilled(path: Path) -> bool:
    return (Path(path) / MARKER).exists()


def load(path: Path, target, dtype: torch.dtype) -> DistilledDraft:
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(path)
    state = storage.read(Path(path) / "model.safetensors")
    draft = DistilledDraft(cfg, target.get_input_embeddings().weight, state["d2t"])
    draft.load_state_dict(
        {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    )
    return draft.to(dtype).to(target.device).eval().requires_grad_(False)


def head_weight(path: Path) -> torch.Tensor:
    """The distilled draft's output layer (V_d, H): its largest matrix."""
    return storage.get(Path(path) / "model.safetensors", "head.weight")


def load_engine(path: Path, target, weights: str = "float"):
    """(draft engine, d2t) on the target engine's kind and activation dtype; on the lean
    engine `weights="int8"` runs its projections and output layer in int8 on the native
    kernels (drafters.weights)."""
    import copy

    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(path)
    state = storage.read(Path(path) / "model.safetensors")
    d2t = state["d2t"].long().to(target.device)
    if target.name == "lean":
        cfg = copy.deepcopy(cfg)
        cfg.tie_word_embeddings = False
        tensors = {k: v for k, v in state.items() if k.startswith("model.")}
        tensors["model.embed_tokens.weight"] = target.embed_weight
        tensors["lm_head.weight"] = state["head.weight"]
        if weights == "int8":
            fmt, kernel = "int8", int8_kernel()
        else:
            fmt, kernel = str(target.dtype).removeprefix("torch."), "aten"
        model = build.build(cfg, tensors, fmt, target.dtype, target.device, kernel)
        model.embed = target.embed_weight  # shared storage, not a copy
        return LeanEngine(model, fmt, f"distilled draft {path}"), d2t
    draft = DistilledDraft(cfg, target.embed_weight, state["d2t"])
    draft.load_state_dict(
        {k: v.to(target.dtype) if v.is_floating_point() else v for k, v in state.items()}
    )
    draft = draft.to(target.dtype).to(target.device).eval().requires_grad_(False)
    return HFEngine(draft), d2t


class ScatterHead(nn.Module):
    """The reduced head as a full-vocabulary output layer: logits of the V_d draft tokens at
    their target ids (`d2t`), −inf elsewhere, so argmax and softmax match the draft's own."""

    def __init__(self, weight: torch.Tensor, d2t: torch.Tensor, vocab: int):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # (V_d, H)
        self.register_buffer("d2t", d2t.long())
        self.vocab = vocab

    def forward(self, x):  # (B, n, H) → (B, n, V)
        small = nn.functional.linear(x, self.weight)
        full = small.new_full((*small.shape[:-1], self.vocab), float("-inf"))
        return full.index_copy_(-1, self.d2t, small)


def to_transformers(path: Path, target):
    """The distilled draft as a plain transformers LlamaForCausalLM (what transformers' assisted
    generation takes): the target's embeddings (shared storage), the stored layers and norm, and
    the reduced head scattered to the full vocabulary. Same dtype and device as `target`."""
    import copy

    from transformers import AutoConfig, LlamaForCausalLM

    cfg = copy.deepcopy(AutoConfig.from_pretrained(path))
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    cfg.tie_word_embeddings = False
    state = storage.read(Path(path) / "model.safetensors")
    model = LlamaForCausalLM(cfg)
    model.model.embed_tokens.weight = target.get_input_embeddings().weight
    got = model.model.load_state_dict(
        {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")},
        strict=False,
    )
    if got.unexpected_keys or set(got.missing_keys) != {"embed_tokens.weight"}:
        raise ValueError(f"{path}: not a distilled draft's layers ({got})")
    dtype = target.get_input_embeddings().weight.dtype
    model.lm_head = ScatterHead(state["head.weight"].to(dtype), state["d2t"], cfg.vocab_size)
    return model.to(dtype).to(target.device).eval().requires_grad_(False)
