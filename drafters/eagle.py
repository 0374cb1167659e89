"""EAGLE draft heads (EAGLE-1/2 and EAGLE-3): the network and the published checkpoint layouts.

Both read, per position t, the target's feature f_t and the embedding of the next token x_{t+1}
(the target's own embedding table, never stored) and run one decoder layer whose output
predicts the next feature; its logits draft x_{t+2}. Drafting deeper feeds the head's output
back as the feature of the next position.

    eagle   f_t = the target's last hidden state (after the final norm)
            a = fc([emb; f])            fc: 2H → H with bias
            o = a + attn(a);  o = o + mlp(post_norm(o))          (no input norm on the layer)
            logits = target_lm_head(o)  (full vocabulary)
    eagle3  f_t = fc([h_low; h_mid; h_high])   three target layers, fc: 3H → H, no bias
            a = [input_norm(emb); hidden_norm(f)]             (2H: q/k/v read 2H)
            o = f + attn(a);  o = o + mlp(post_norm(o))
            logits = lm_head(norm(o))   over a reduced draft vocabulary; d2t maps it to target ids

Published layouts (the EAGLE authors' Hub checkpoints; ours are saved the same way):
    eagle   config.json (a LlamaConfig, num_hidden_layers 1) + pytorch_model.bin or
            model.safetensors with fc.weight, fc.bias, layers.0.self_attn.{q,k,v,o}_proj.weight,
            layers.0.mlp.{gate,up,down}_proj.weight, layers.0.post_attention_layernorm.weight
    eagle3  config.json (LlamaConfig fields + draft_vocab_size, architectures
            ["LlamaForCausalLMEagle3"]) + weights fc.weight, midlayer.{self_attn,mlp}.*,
            midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight, norm.weight,
            lm_head.weight, d2t (draft id → target id *offset*: target = d + d2t[d]), t2d (bool)
An `embed_tokens.weight` in a checkpoint is ignored: the target's embeddings are used.
Which target layers EAGLE-3 taps is not in the published config; the authors' code uses
hidden_states[2], [N // 2], [N − 3] of an N-layer target (transformers' `hidden_states` indices,
the input of that layer), which is our default; `eagle_aux_hidden_state_layer_ids` overrides it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from drafters import eagle_native, storage
from drafters.draftvocab import DraftVocab
from engines.base import additive, tree_mask

KINDS = ("eagle", "eagle3")
EAGLE3_ARCH = "LlamaForCausalLMEagle3"


def default_layers(kind: str, num_target_layers: int) -> list[int]:
    if kind == "eagle":
        return [-1]
    return [2, num_target_layers // 2, num_target_layers - 3]


class Attention(nn.Module):
    """Grouped-query attention with RoPE over (past keys, new keys) and an explicit float mask."""

    def __init__(self, cfg, in_dim: int):
        super().__init__()
        self.nh, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh
        bias = bool(getattr(cfg, "attention_bias", False))
        self.q_proj = nn.Linear(in_dim, self.nh * self.hd, bias=bias)
        self.k_proj = nn.Linear(in_dim, self.nkv * self.hd, bias=bias)
        self.v_proj = nn.Linear(in_dim, self.nkv * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, mask, past_k=None, past_v=None, cache=None):
        """x (B, n, in); mask (B|1, 1, n, past + n) additive. → (out, k_new, v_new).
        Past keys come either as tensors (training: concatenated) or as a `cache` with
        append(k, v) and views .k/.v (drafting: the new keys written in place, then attended)."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        B, n, _ = x.shape
        q = self.q_proj(x).view(B, n, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, n, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, n, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if cache is not None:
            cache.append(k, v)
            kk, vv = cache.k, cache.v
        else:
            kk = k if past_k is None else torch.cat([past_k, k], dim=-2)
            vv = v if past_v is None else torch.cat([past_v, v], dim=-2)
        # grouped heads read their shared K/V in place (no per-call copy of the cache)
        out = F.scaled_dot_product_attention(
            q, kk, vv, attn_mask=mask, enable_gqa=self.nh != self.nkv
        )
        return self.o_proj(out.transpose(1, 2).reshape(B, n, -1)), k, v


class Layer(nn.Module):
    def __init__(self, cfg, kind: str):
        from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

        super().__init__()
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.kind = kind
        self.self_attn = Attention(cfg, H if kind == "eagle" else 2 * H)
        self.mlp = LlamaMLP(cfg)
        self.post_attention_layernorm = LlamaRMSNorm(H, eps=eps)
        if kind == "eagle3":
            self.input_layernorm = LlamaRMSNorm(H, eps=eps)
            self.hidden_norm = LlamaRMSNorm(H, eps=eps)

    def forward(self, residual, attn_in, cos, sin, mask, past_k=None, past_v=None, cache=None):
        a, k, v = self.self_attn(attn_in, cos, sin, mask, past_k, past_v, cache)
        o = residual + a
        return o + self.mlp(self.post_attention_layernorm(o)), k, v


class EagleHead(nn.Module):
    """One EAGLE head. `attach(target)` gives it the target's embeddings (and, for `eagle`, its
    output layer); they are used in place, never copied or saved."""

    def __init__(
        self,
        cfg,
        kind: str,
        target_layers: list[int] | None = None,
        d2t: torch.Tensor | None = None,
    ):
        from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r}; expected one of {KINDS}")
        self.kind, self.config = kind, cfg
        H = cfg.hidden_size
        self.target_layers = list(target_layers or [-1])
        self.rotary = LlamaRotaryEmbedding(cfg)
        if kind == "eagle":
            self.fc = nn.Linear(2 * H, H, bias=True)
            self.layers = nn.ModuleList([Layer(cfg, kind)])
        else:
            th = int(getattr(cfg, "target_hidden_size", None) or H)
            self.fc = nn.Linear(len(self.target_layers) * th, H, bias=False)
            self.midlayer = Layer(cfg, kind)
            self.norm = LlamaRMSNorm(H, eps=cfg.rms_norm_eps)
            d2t = torch.arange(cfg.vocab_size) if d2t is None else d2t.long()
            self.lm_head = nn.Linear(H, d2t.numel(), bias=False)
            self.register_buffer("d2t", d2t)  # absolute target ids (offsets only in the files)
        self.embed = None
        self.out_head = None
        self._rope = None  # (cos, sin) table by position (rope)
        self.vocab = None  # eagle: a drafters.draftvocab.DraftVocab over the target's output layer
        self.native = None  # drafters.eagle_native.NativeStep once use_native() finds it possible

    @property
    def layer(self) -> Layer:
        return self.layers[0] if self.kind == "eagle" else self.midlayer

    def attach(self, target) -> "EagleHead":
        """target: an engine (engines.base.Engine) or a transformers model (training)."""
        # plain tensors sharing the target's storage: not parameters of the head, never saved
        if hasattr(target, "output_weight"):
            self.embed, self.out_head = target.embed_weight, target.output_weight()
        else:
            self.embed = target.get_input_embeddings().weight.detach()
            self.out_head = target.get_output_embeddings().weight.detach()
        self.restrict(None, None)  # eagle: the full vocabulary until restricted
        return self

    def restrict(self, frequent: list[int] | None, size: int | None) -> int:
        """Draft over the `size` most frequent tokens only (`frequent`: target ids, most
        frequent first); returns the draft vocabulary's size. eagle: rows of the target's
        output layer (drafters.draftvocab); eagle3: the rows of its own output layer (and d2t
        entries) whose tokens rank first in `frequent`, in draft-id order, tokens it does not
        list after those it does. Lossless either way: only which tokens are drafted changes."""
        if self.kind == "eagle":
            self.vocab = DraftVocab(self.out_head, frequent, size)
            return self.vocab.size
        n = self.d2t.numel()
        if not size or not frequent or size >= n:
            return n
        rank = {int(t): i for i, t in enumerate(frequent)}
        ids = self.d2t.tolist()
        keep = sorted(sorted(range(n), key=lambda j: (rank.get(ids[j], len(rank)), j))[:size])
        rows = torch.tensor(keep, dtype=torch.long, device=self.d2t.device)
        old = self.lm_head
        self.lm_head = nn.Linear(old.in_features, size, bias=False)
        self.lm_head.to(device=old.weight.device, dtype=old.weight.dtype)
        with torch.no_grad():
            self.lm_head.weight.copy_(old.weight[rows])
        self.d2t = self.d2t[rows]
        return size

    def own_bytes(self) -> int:
        """Its own weights and buffers (int8 layers included), not the target's it shares."""
        own = [*self.parameters(), *self.buffers()]
        n = sum(t.numel() * t.element_size() for t in own)
        return n + (self.vocab.extra_bytes() if self.vocab is not None else 0)

    def fuse(self, hidden: list[torch.Tensor]) -> torch.Tensor:
        """The target's hidden states at `target_layers` (each (..., H)) → features (..., H)."""
        if self.kind == "eagle":
            return hidden[0]
        return self.fc(torch.cat(hidden, dim=-1))

    def rope(self, x: torch.Tensor, positions: torch.Tensor):
        """cos, sin at `positions` (B, n): rows of a table computed once (grown by doubling)
        by the target's rotary embedding, the same values it gives per call; rotary kinds that
        rescale with the length ("dynamic") are computed per call."""
        if "dynamic" in str(getattr(self.rotary, "rope_type", "default")):
            return self.rotary(x, positions)
        need = int(positions.max()) + 1
        t = self._rope
        if t is None or t[0].shape[0] < need or t[0].device != x.device or t[0].dtype != x.dtype:
            span = torch.arange(max(2 * need, 256), device=x.device)[None]
            cos, sin = self.rotary(x, span)
            self._rope = t = (cos[0], sin[0])
        return t[0][positions], t[1][positions]

    def forward(self, feat, ids, positions, mask, past_k=None, past_v=None, cache=None):
        """feat (B, n, H) features f_t, ids (B, n) tokens x_{t+1}, positions (B, n) = t;
        past keys as tensors or a `cache` (Attention.forward).
        → (out (B, n, H): predicted f_{t+1}, new keys, new values)."""
        emb = F.embedding(ids, self.embed).to(feat.dtype)
        cos, sin = self.rope(feat, positions)
        if self.kind == "eagle":
            a = self.fc(torch.cat([emb, feat], dim=-1))
            return self.layer(a, a, cos, sin, mask, past_k, past_v, cache)
        a = torch.cat([self.midlayer.input_layernorm(emb), self.midlayer.hidden_norm(feat)], -1)
        return self.layer(feat, a, cos, sin, mask, past_k, past_v, cache)

    def use_native(self) -> bool:
        """Draft with the layer as one native call where it runs int8 on the native kernels
        (drafters.eagle_native); whether it does."""
        self.native = eagle_native.build(self)
        return self.native is not None

    def step(self, feat, ids, positions, visible, cache, keep: int = 0) -> torch.Tensor:
        """One drafting step of n rows after `cache` (drafters.headcache.HeadCache, extended
        in place): feat (n, H), ids (n,), positions (n,); visible (n, cached + n) bool, or
        None: causal.
        keep: the caller reads only the last `keep` rows' outputs (0: all), which the native
        step then computes alone (the cache still gains every row's keys and values).
        → outputs (n, H)."""
        if self.native is not None and feat.device.type == "cpu":
            return self.native(self, feat, ids, positions, visible, cache, keep)
        n = feat.shape[0]
        if visible is None:
            own = torch.ones(n, n, dtype=torch.bool, device=feat.device).tril()
            visible = tree_mask(own, len(cache))[0]
        mask = additive(visible, feat.dtype)[None, None]  # (1, 1, n, cached + n)
        out, _, _ = self(feat[None], ids[None], positions[None], mask, cache=cache)
        return out[0]

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits (full vocabulary for `eagle`)."""
        if self.kind == "eagle":
            return self.vocab.logits(out)
        return self.lm_head(self.norm(out))

    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        if self.kind == "eagle":
            return self.vocab.to_target(draft_ids)
        return self.d2t[draft_ids]


def head_config(target_cfg, kind: str):
    """The head's LlamaConfig: the target's shapes, one layer."""
    import copy

    cfg = copy.deepcopy(target_cfg)
    cfg.num_hidden_layers = 1
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:1]
    for attr in ("quantization_config", "_name_or_path"):
        if hasattr(cfg, attr):
            try:
                delattr(cfg, attr)
            except AttributeError:
                pass
    cfg.architectures = [EAGLE3_ARCH if kind == "eagle3" else "LlamaForCausalLM"]
    return cfg


# --- published layouts --------------------------------------------------------------------


def save(
    head: EagleHead,
    out: Path,
    base: str,
    dtype=torch.bfloat16,
    extra: dict | None = None,
    int8: tuple[str, ...] = (),
):
    """The published layout; `int8` names matrices stored in int8 (drafters.storage)."""
    out.mkdir(parents=True, exist_ok=True)
    state = {}
    for k, v in head.state_dict().items():
        if k.startswith("rotary."):
            continue
        state[k] = v.detach().to(dtype) if v.is_floating_point() else v.detach()
    if head.kind == "eagle3":
        d2t = head.d2t.long()
        state["d2t"] = d2t - torch.arange(d2t.numel())  # published convention: offsets
        t2d = torch.zeros(head.config.vocab_size, dtype=torch.bool)
        t2d[d2t] = True
        state["t2d"] = t2d
    storage.write(state, out / "model.safetensors", int8)
    cfg = head.config.to_dict()
    cfg["architectures"] = [EAGLE3_ARCH if head.kind == "eagle3" else "LlamaForCausalLM"]
    cfg["base_model_name_or_path"] = base
    if head.kind == "eagle":
        cfg["bias"] = True
    else:
        cfg["draft_vocab_size"] = int(head.d2t.numel())
        cfg["eagle_aux_hidden_state_layer_ids"] = head.target_layers
    cfg["specsweep"] = extra or {}
    (out / "config.json").write_text(json.dumps(cfg, indent=2, default=str))


def read_state(path: Path) -> dict:
    if (path / "model.safetensors").exists():
        return storage.read(path / "model.safetensors")
    if (path / "pytorch_model.bin").exists():
        return torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{path} has neither model.safetensors nor pytorch_model.bin")


def kind_of(cfg: dict, state: dict) -> str:
    if EAGLE3_ARCH in (cfg.get("architectures") or []) or any(
        k.startswith("midlayer.") for k in state
    ):
        return "eagle3"
    return "eagle"


def load(path: Path, target, dtype=torch.float32) -> tuple[EagleHead, dict]:
    """A head from a directory in the published layout, attached to `target`."""
    from transformers import LlamaConfig

    raw = json.loads((path / "config.json").read_text())
    state = read_state(path)
    kind = kind_of(raw, state)
    fields = {k: v for k, v in raw.items() if k not in ("architectures", "specsweep")}
    cfg = LlamaConfig(**fields)
    if kind == "eagle" and int(raw.get("num_hidden_layers", 1)) != 1:
        raise ValueError(
            f"{path}: EAGLE heads with {raw['num_hidden_layers']} layers are not "
            f"supported (published EAGLE-1/2 heads have 1)"
        )
    n_target = target.config.num_hidden_layers
    layers = raw.get("eagle_aux_hidden_state_layer_ids") or default_layers(kind, n_target)
    d2t = None
    if kind == "eagle3":
        if "d2t" in state:
            d2t = state["d2t"].long() + torch.arange(state["d2t"].numel())
        else:  # no reduced vocabulary
            d2t = torch.arange(state["lm_head.weight"].shape[0])
    head = EagleHead(cfg, kind, layers, d2t)
    state = {
        k: v
        for k, v in state.items()
        if k not in ("d2t", "t2d", "embed_tokens.weight") and not k.startswith("rotary.")
    }
    if kind == "eagle" and "fc.bias" not in state:  # heads saved with bias=False
        head.fc.bias.data.zero_()
        state["fc.bias"] = head.fc.bias.data
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.startswith("rotary.") and m != "d2t"]
    if missing or unexpected:
        raise ValueError(
            f"{path}: not an EAGLE layout (missing {missing[:4]}, "
            f"unexpected {list(unexpected)[:4]})"
        )
    head = head.to(dtype).attach(target).eval().requires_grad_(False)
    return head.to(target.device), raw
