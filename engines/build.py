"""Building a lean model from stored tensors: a transformers state dict or GGUF blocks.

Weight formats per layer (engines.formats), for `weights=`:
    float32 | bfloat16 | float16   every projection and the output layer unquantized
    int8                           every projection and the output layer int8 per row
    int4                           projections int4 (groups of 32); the output layer at 8 bits,
                                   as int4 recipes and llama.cpp keep it: a GGUF's Q8_0 blocks
                                   as they are (q8_0), else int8 per row. GGUF Q4_1 blocks
                                   become int4 groups directly.
`kernel` is the kernel of every projection (engines.formats): for int8/int4 native or aten.
Fused projections: Wqkv = [Wq; Wk; Wv] and Wgu = [Wgate; Wup] (rows concatenated), so a row's
output is the same dot product as in the unfused model.
"""

from __future__ import annotations

import torch

from engines.formats import Linear
from engines.gguf import Q4_1, Q8_0
from engines.lean import Block, LeanModel, check_supported
from groundfloor.errors import UserError


def as_float(t) -> torch.Tensor:
    return t.dequantize() if isinstance(t, (Q4_1, Q8_0)) else t.float()


def fused(parts: list, fmt: str, device, kernel: str, bias=None) -> Linear:
    """One Linear over the row-concatenation of `parts` (tensors or GGUF blocks)."""
    if fmt == "int4" and all(isinstance(p, Q4_1) for p in parts):
        q = torch.cat([p.q for p in parts])
        d = torch.cat([p.d for p in parts])
        m = torch.cat([p.m for p in parts])
        return Linear.from_int4(q, d, m, bias=bias, device=device, kernel=kernel)
    w = torch.cat([as_float(p) for p in parts])
    return Linear.from_float(w, fmt, bias=bias, device=device, kernel=kernel)


def build(
    config, tensors: dict, weights: str, dtype: torch.dtype, device, kernel: str = "aten"
) -> LeanModel:
    """tensors: transformers names → float tensors or GGUF blocks (engines.gguf)."""
    check_supported(config)
    if weights == "bfloat16":
        check_bf16_exact(tensors)
    device = torch.device(device)
    c = config
    blocks = [
        block(c, tensors, f"model.layers.{i}.", weights, dtype, device, kernel)
        for i in range(int(c.num_hidden_layers))
    ]
    head = tensors.get("lm_head.weight")
    if head is None or getattr(c, "tie_word_embeddings", False):
        head = tensors["model.embed_tokens.weight"]  # tied: the same stored blocks
    embed = as_float(tensors["model.embed_tokens.weight"])
    if weights == "int4" and isinstance(head, Q8_0):
        output = Linear.from_q8_0(head.q, head.d, device=device, kernel=kernel)
    else:
        out_fmt = "int8" if weights == "int4" else weights
        output = Linear.from_float(as_float(head), out_fmt, device=device, kernel=kernel)
    return LeanModel(
        config,
        blocks,
        embed.to(device=device, dtype=dtype),
        as_float(tensors["model.norm.weight"]).to(device=device, dtype=dtype),
        output,
        dtype,
        device,
    )


def check_bf16_exact(tensors: dict) -> None:
    """float16 weights become bfloat16 only where every value is one (bfloat16 has 3 fewer
    significant bits, and a wider range): one error line naming the first tensor that would
    be rounded, never a silent rounding. float32 weights asked for as bfloat16 are a format the
    user chose (named with every result)."""
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.dtype == torch.float16:
            back = t.to(torch.bfloat16).to(torch.float16)
            if not torch.equal(back[~t.isnan()], t[~t.isnan()]):
                n = int((back != t).sum())
                raise UserError(
                    f"model.weights=bfloat16: the checkpoint's float16 tensor {name} has {n} "
                    f"values bfloat16 cannot hold (it would round them); use model.weights="
                    f"float16 or float32"
                )


def block(c, tensors: dict, p: str, proj: str, dtype: torch.dtype, device, kernel: str) -> Block:
    """The layer whose tensors' names start with `p`: fused QKV (with Qwen2's bias) and
    gate/up projections in format `proj` on `kernel`, its two norms in `dtype`."""
    nh, nkv = int(c.num_attention_heads), int(c.num_key_value_heads)
    hd = int(getattr(c, "head_dim", None) or c.hidden_size // nh)

    def norm(name):
        return as_float(tensors[name]).to(device=device, dtype=dtype)

    bias = None
    if f"{p}self_attn.q_proj.bias" in tensors:  # Qwen2
        bias = torch.cat([as_float(tensors[f"{p}self_attn.{x}_proj.bias"]) for x in "qkv"]).to(
            device=device, dtype=dtype
        )
    wqkv = fused(
        [tensors[f"{p}self_attn.{x}_proj.weight"] for x in "qkv"], proj, device, kernel, bias
    )
    wo = fused([tensors[f"{p}self_attn.o_proj.weight"]], proj, device, kernel)
    wgu = fused(
        [tensors[f"{p}mlp.gate_proj.weight"], tensors[f"{p}mlp.up_proj.weight"]],
        proj,
        device,
        kernel,
    )
    wd = fused([tensors[f"{p}mlp.down_proj.weight"]], proj, device, kernel)
    return Block(
        wqkv,
        wo,
        wgu,
        wd,
        norm(f"{p}input_layernorm.weight"),
        norm(f"{p}post_attention_layernorm.weight"),
        nh,
        nkv,
        hd,
        float(c.rms_norm_eps),
    )


def state_dict_of(path: str) -> dict:
    """A transformers checkpoint's tensors by name (safetensors or .bin, sharded or not)."""
    import json
    from pathlib import Path

    p = Path(path)
    index = next(
        (
            p / f
            for f in ("model.safetensors.index.json", "pytorch_model.bin.index.json")
            if (p / f).exists()
        ),
        None,
    )
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values()))
        if index
        else [f for f in ("model.safetensors", "pytorch_model.bin") if (p / f).exists()][:1]
    )
    if not files:
        raise FileNotFoundError(f"{path} holds no model.safetensors or pytorch_model.bin")
    out = {}
    for f in files:
        if f.endswith(".safetensors"):
            from safetensors.torch import load_file

            out.update(load_file(str(p / f)))
        else:
            out.update(torch.load(p / f, map_location="cpu", weights_only=True))
    return out
