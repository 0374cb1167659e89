"""Reading a llama-family GGUF file's tensors as they are stored, without dequantizing them.

    blocks = read("SmolLM2-135M-Instruct.Q4_1.gguf")    # {hf name: Tensor | Q4_1 | Q8_0}

GGUF block formats used by the embedded model (32 weights per block, along the input dim):
    Q4_1  d (f16), m (f16), 16 bytes of nibbles   w = d · q + m,  q ∈ 0..15
          byte j holds element j (low nibble) and element j + 16 (high nibble)
    Q8_0  d (f16), 32 × int8                      w = d · q
F32 tensors (norms) come back as float32 tensors. Names are mapped to transformers' Llama names.
llama.cpp's converter permutes the rows of attn_q / attn_k for its interleaved rotary layout; we
undo that row permutation (as transformers' GGUF loader does) on the blocks themselves, since
whole rows move and no block is split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

GROUP = 32


@dataclass
class Q4_1:
    """Asymmetric 4-bit groups: w[o, g·32 + j] = d[o, g] · q[o, g·32 + j] + m[o, g]."""

    q: torch.Tensor  # (out, in) uint8, values 0..15
    d: torch.Tensor  # (out, in / 32) float32 (exact f16 values)
    m: torch.Tensor  # (out, in / 32) float32

    def dequantize(self) -> torch.Tensor:
        o, i = self.q.shape
        w = self.q.view(o, i // GROUP, GROUP).float() * self.d[..., None] + self.m[..., None]
        return w.view(o, i)

    def rows(self, idx: torch.Tensor) -> "Q4_1":
        return Q4_1(self.q[idx], self.d[idx], self.m[idx])


@dataclass
class Q8_0:
    """Symmetric 8-bit groups: w[o, g·32 + j] = d[o, g] · q[o, g·32 + j]."""

    q: torch.Tensor  # (out, in) int8
    d: torch.Tensor  # (out, in / 32) float32

    def dequantize(self) -> torch.Tensor:
        o, i = self.q.shape
        return (self.q.view(o, i // GROUP, GROUP).float() * self.d[..., None]).view(o, i)

    def rows(self, idx: torch.Tensor) -> "Q8_0":
        return Q8_0(self.q[idx], self.d[idx])


def _q4_1(raw: np.ndarray) -> Q4_1:
    rows, nbytes = raw.shape
    blocks = raw.reshape(rows, nbytes // 20, 20)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    qs = blocks[..., 4:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # (rows, groups, 32)
    return Q4_1(
        torch.from_numpy(q.reshape(rows, -1).astype(np.uint8)),
        torch.from_numpy(d),
        torch.from_numpy(m),
    )


def _q8_0(raw: np.ndarray) -> Q8_0:
    rows, nbytes = raw.shape
    blocks = raw.reshape(rows, nbytes // 34, 34)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    q = blocks[..., 2:].copy().view(np.int8)
    return Q8_0(torch.from_numpy(q.reshape(rows, -1)), torch.from_numpy(d))


def stored(t, path) -> torch.Tensor | Q4_1 | Q8_0:
    """A GGUFReader tensor as the file stores it, in the file's row order: Q4_1 or Q8_0 blocks,
    or a float32 tensor (F32, F16, BF16: exact)."""
    kind, raw = t.tensor_type.name, np.asarray(t.data)
    if kind == "Q4_1":
        return _q4_1(raw)
    if kind == "Q8_0":
        return _q8_0(raw)
    if kind in ("F32", "F16"):
        return torch.from_numpy(np.array(raw, dtype=np.float32))  # already (rows, cols)
    if kind == "BF16":
        bits = np.array(raw).view(np.int16)
        bits = bits.reshape(raw.shape[0], -1) if raw.ndim == 2 else bits
        return torch.from_numpy(bits).view(torch.bfloat16).float()
    raise ValueError(
        f"{path}: tensor {t.name} is {kind}; the lean engine reads F32, F16, BF16, Q4_1 and "
        f"Q8_0 GGUF tensors (use engine=hf)"
    )


NAMES = {  # GGUF suffix → transformers Llama suffix
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_name(name: str) -> str:
    if name in TOP:
        return TOP[name]
    _, layer, rest = name.split(".", 2)
    return f"model.layers.{layer}.{NAMES[rest]}"


def unpermute_rows(rows: int, heads: int) -> torch.Tensor:
    """Row order that undoes llama.cpp's q/k permutation: (heads, 2, dim) ← (heads, dim, 2)."""
    dim = rows // heads // 2
    return torch.arange(rows).view(heads, dim, 2).transpose(1, 2).reshape(-1)


def read(path: str | Path) -> tuple[dict, dict]:
    """(tensors by transformers name, the file's metadata as plain values)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    meta = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.") or not field.types:
            continue
        try:
            val = field.contents()
        except Exception:  # unusual field types are not needed here
            continue
        meta[key] = val
    heads = int(meta["llama.attention.head_count"])
    kv_heads = int(meta.get("llama.attention.head_count_kv", heads))
    out = {}
    for t in reader.tensors:
        w = stored(t, path)
        name = hf_name(t.name)
        if ".attn_q." in t.name or ".attn_k." in t.name:
            n = heads if ".attn_q." in t.name else kv_heads
            rows = w.q.shape[0] if hasattr(w, "q") else w.shape[0]
            idx = unpermute_rows(rows, n)
            w = w.rows(idx) if hasattr(w, "rows") else w[idx]
        out[name] = w
    return out, meta
