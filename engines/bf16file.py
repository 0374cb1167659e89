"""The 16-bit copy of a GGUF model: every tensor of the file dequantized once (Q4_1: d·q + m,
Q8_0: d·q, F32 as stored) and rounded to bfloat16, kept in the user's cache as one file named by
the GGUF's content hash and memory-mapped on every later load.

    tensors = bf16file.tensors(path_to_gguf)   # {transformers name: bfloat16 tensor}

It is the model at 16 bits *as the shipped file has it*: the hub's own 16-bit weights are not
reachable offline, so its quality is the quantized file's, its weights the file's up to bfloat16
rounding (a Q4_1 value d·q + m needs more than bfloat16's 8 significant bits where m and d·q
differ in scale). Every result on it says so (engines.load: `weights_source`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from engines import gguf
from groundfloor.paths import cache_root


def digest(path: Path) -> str:
    """The GGUF file's sha256, 16 hex digits: the cache's key (another file, another copy)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def cached(path: Path) -> Path:
    """Where the 16-bit copy of the GGUF file at `path` lives."""
    return cache_root() / "bf16" / f"{path.stem}-{digest(path)}.pt"


def convert(path: Path) -> dict:
    """Every tensor of the GGUF file dequantized and rounded to bfloat16, by transformers name."""
    blocks, _ = gguf.read(path)
    return {
        name: (t.dequantize() if isinstance(t, (gguf.Q4_1, gguf.Q8_0)) else t.float()).to(
            torch.bfloat16
        )
        for name, t in blocks.items()
    }


def tensors(path: str | Path) -> dict:
    """The 16-bit copy's tensors, built on the first call (a few seconds; written to a
    temporary file and renamed, so processes side by side never read half a file), memory-
    mapped after."""
    path = Path(path)
    out = cached(path)
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        torch.save(convert(path), tmp)
        os.replace(tmp, out)
    return torch.load(out, mmap=True, weights_only=True)
