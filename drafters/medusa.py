"""Medusa heads: the network, its loss, and the published file layout.

Head i (0-based) reads the target's last hidden state h_t (after the final norm) and predicts the
token at t + 2 + i (the target's own LM head predicts t + 1):
    r_i = h_t + SiLU(W_i h_t + b_i)        (medusa_num_layers such residual blocks)
    logits_i = lm_head_i(r_i)              (V,)
Training follows the Medusa-1 recipe on self-distilled data: the backbone is frozen (so the
target stays exact), W_i starts at zero (each head starts as the target's next-token head) and
the head loss is weighted 0.8^i. Here the projection lm_head_i *is* the target's output layer,
shared, which saves V × H parameters per head; the published layout (Medusa's
`medusa_lm_head.safetensors` with keys `{i}.{j}.linear.weight|bias` and `{i}.{L}.weight`, plus
config.json with `medusa_num_heads`, `medusa_num_layers`, `base_model_name_or_path`) is written
with the projection copied in when `export_full=True`, and read either way.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

WEIGHTS = "medusa_lm_head.safetensors"


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x):
        return x + nn.functional.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """Blocks of every head; projection to the vocabulary either own (published heads) or shared."""

    def __init__(
        self,
        hidden: int,
        num_heads: int,
        num_layers: int = 1,
        lm_heads: list[torch.Tensor] | None = None,
    ):
        super().__init__()
        self.num_heads, self.num_layers = num_heads, num_layers
        self.blocks = nn.ModuleList(
            nn.Sequential(*[ResBlock(hidden) for _ in range(num_layers)]) for _ in range(num_heads)
        )
        self.own = (
            None
            if lm_heads is None
            else nn.ParameterList(nn.Parameter(w, requires_grad=False) for w in lm_heads)
        )

    def features(self, h: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """h (..., H) → (n, ..., H) inputs of the first n heads' projections (None: every
        head); each head reads h alone, so fewer heads leave the others' outputs as they are."""
        return torch.stack([blk(h) for blk in self.blocks[: n or self.num_heads]])

    def logits(self, h: torch.Tensor, lm_head: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """h (..., H) → (n, ..., V), the first n heads (None: every head); lm_head (V, H) is
        the target's, used when shared."""
        f = self.features(h, n)
        if self.own is None:
            return f @ lm_head.T
        return torch.stack([f[i] @ self.own[i].T for i in range(len(f))])

    def extra_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in [*self.parameters(), *self.buffers()])


def loss(
    heads: MedusaHeads,
    h: torch.Tensor,
    labels: torch.Tensor,
    lm_head: torch.Tensor,
    decay: float = 0.8,
):
    """h (N, H) hidden states; labels (num_heads, N) row indices of `lm_head`, -100 = ignore,
    -1 = a token outside `lm_head`'s rows (left out of the loss, counted as a miss).

    → (weighted loss, per-head loss (num_heads,), per-head top-1 accuracy (num_heads,))."""
    logits = heads.logits(h, lm_head).float()  # (heads, N, V)
    per, acc = [], []
    for i in range(heads.num_heads):
        scored = labels[i] != -100
        inside = labels[i] >= 0
        li = nn.functional.cross_entropy(logits[i][inside], labels[i][inside])
        per.append(li)
        hits = (logits[i][inside].argmax(-1) == labels[i][inside]).sum()
        acc.append(hits.float() / scored.sum().clamp_min(1))
    per_t = torch.stack(per)
    w = decay ** torch.arange(heads.num_heads, dtype=per_t.dtype)
    return (w * per_t).sum(), per_t.detach(), torch.stack(acc).detach()


def labels_for(ids: torch.Tensor, start: int, num_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions t ≥ start − 1 (the last prompt token onward) and their labels ids[t + 2 + i]."""
    L = ids.numel()
    pos = torch.arange(start - 1, L - 2)
    lab = torch.full((num_heads, pos.numel()), -100, dtype=torch.long)
    for i in range(num_heads):
        tgt = pos + 2 + i
        ok = tgt < L
        lab[i, ok] = ids[tgt[ok]].long()
    return pos, lab


def save(
    heads: MedusaHeads,
    out: Path,
    base: str,
    lm_head: torch.Tensor | None = None,
    export_full: bool = False,
    extra: dict | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    state = {}
    for i, blk in enumerate(heads.blocks):
        for j, rb in enumerate(blk):
            state[f"{i}.{j}.linear.weight"] = rb.linear.weight.detach().contiguous()
            state[f"{i}.{j}.linear.bias"] = rb.linear.bias.detach().contiguous()
        if export_full:
            w = lm_head if heads.own is None else heads.own[i]
            state[f"{i}.{heads.num_layers}.weight"] = w.detach().contiguous().clone()
    state = {k: v.to(dtype) for k, v in state.items()}
    save_file(state, str(out / WEIGHTS), metadata={"format": "pt"})
    cfg = {
        "medusa_num_heads": heads.num_heads,
        "medusa_num_layers": heads.num_layers,
        "base_model_name_or_path": base,
        "hidden_size": heads.blocks[0][0].linear.in_features,
        "shared_lm_head": not export_full and heads.own is None,
    }
    cfg.update(extra or {})
    (out / "config.json").write_text(json.dumps(cfg, indent=2))


def load(path: Path, dtype=torch.float32) -> tuple[MedusaHeads, dict]:
    """Heads from a directory in Medusa's layout (ours or published; .safetensors or .pt)."""
    cfg = json.loads((path / "config.json").read_text())
    if (path / WEIGHTS).exists():
        state = load_file(str(path / WEIGHTS))
    else:
        state = torch.load(path / "medusa_lm_head.pt", map_location="cpu", weights_only=True)
    n, L = int(cfg["medusa_num_heads"]), int(cfg.get("medusa_num_layers", 1))
    state = {k.removeprefix("medusa_head."): v for k, v in state.items()}
    hidden = state["0.0.linear.weight"].shape[1]
    own = [state[f"{i}.{L}.weight"] for i in range(n)] if f"0.{L}.weight" in state else None
    heads = MedusaHeads(hidden, n, L, own)
    for i in range(n):
        for j in range(L):
            heads.blocks[i][j].linear.weight.data.copy_(state[f"{i}.{j}.linear.weight"])
            heads.blocks[i][j].linear.bias.data.copy_(state[f"{i}.{j}.linear.bias"])
    return heads.to(dtype).eval().requires_grad_(False), cfg
