"""Weight files of our drafters: safetensors, with the largest matrices optionally in int8.

The shipped drafters and the committed distillation ids must fit a small working tree. A
draft-vocabulary output layer (8,192 × 576 for the EAGLE-3 head) is most of a drafter's bytes;
stored as per-row symmetric int8 (w = s[o]·q, the format drafters.weights runs) it takes half
the bfloat16 bytes. Such a matrix is written as `<name>` (int8) plus `<name>.int8_scale`
(float32, one per row) and read back as bfloat16, so every loader sees the layout it expects;
other tools reading the file see an extra key and an int8 tensor.

    write(state, path, int8=("lm_head.weight",))
    state = read(path)
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engines.formats import quantize_int8

SCALE = ".int8_scale"


def write(state: dict, path: Path, int8: tuple[str, ...] = ()) -> None:
    out = {}
    for k, v in state.items():
        if k in int8 and v.is_floating_point() and v.dim() == 2:
            q, s = quantize_int8(v)
            out[k], out[k + SCALE] = q, s.float()
        else:
            out[k] = v
    save_file({k: v.contiguous() for k, v in out.items()}, str(path), metadata={"format": "pt"})


def _dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (q.float() * scale[:, None]).to(torch.bfloat16)


def read(path: Path) -> dict:
    state = load_file(str(path))
    for k in [k for k in state if k.endswith(SCALE)]:
        name = k[: -len(SCALE)]
        state[name] = _dequantize(state[name], state.pop(k))
    return state


def get(path: Path, name: str) -> torch.Tensor:
    """One tensor of a file (dequantized when stored in int8), without reading the rest."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        t = f.get_tensor(name)
        if name + SCALE in f.keys():
            t = _dequantize(t, f.get_tensor(name + SCALE))
    return t
