"""Weights in 2 MB pages, where Linux lends them (transparent huge pages).

A decoding step streams every weight once (~111 MB for the embedded int4 target), and a
drafter step streams its few MB cold after it. In 4 KB pages that is ~27,000 pages a step,
more than the CPU's TLBs hold, so the stream pays a page walk every 4 KB; in 2 MB pages it is
~55. Measured on Zen 4 (docs/decode_step.md): one target forward 0.5–0.8 ms faster, the same
bits (only where the bytes live changes).

    place(tensors)          # each tensor's bytes moved, in place, into one 2 MB-aligned arena
    place_module(module)    # the weight buffers a module owns (views of others are left)

Where the kernel's THP mode is `never`, on other systems, off the CPU, or with
SPECSWEEP_HUGEPAGES=0, nothing moves. `placed_bytes()` is what this process moved; the lean
engine records what it placed in env.json (`engine_choice.hugepages_mb`).
"""

from __future__ import annotations

import ctypes
import os
import sys

import torch

PAGE = 2 << 20
MADV_HUGEPAGE = 14
THP = "/sys/kernel/mm/transparent_hugepage/enabled"
_PLACED = [0]


def available() -> bool:
    """Linux with transparent huge pages in `always` or `madvise` mode, not turned off."""
    if os.environ.get("SPECSWEEP_HUGEPAGES", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        with open(THP) as f:
            mode = f.read()
    except OSError:
        return False
    return "[never]" not in mode


def _owns(t: torch.Tensor) -> bool:
    """A dense CPU tensor that is its storage's only user of bytes (not a view into another,
    not an opaque one: oneDNN's reordered weights keep their own layout)."""
    if t.device.type != "cpu" or t.layout != torch.strided or t.is_mkldnn:
        return False
    try:
        nbytes = t.untyped_storage().nbytes()
    except (NotImplementedError, RuntimeError):
        return False
    return t.is_contiguous() and t.storage_offset() == 0 and nbytes == t.numel() * t.element_size()


def _advise(start: int, length: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), MADV_HUGEPAGE) == 0


def place(tensors) -> int:
    """Move each tensor's bytes into one arena aligned to 2 MB and advised for huge pages
    (before its pages are first touched, so the kernel backs them with 2 MB pages where it has
    them). The tensors keep their identity (`set_`), so whatever holds them, native code
    included, reads the new bytes. → bytes moved (0 where nothing was)."""
    todo, seen = [], set()
    for t in tensors:
        if isinstance(t, torch.Tensor) and id(t) not in seen and _owns(t) and t.numel():
            seen.add(id(t))
            todo.append(t)
    sizes = [(t.numel() * t.element_size() + 63) // 64 * 64 for t in todo]
    total = sum(sizes)
    if total < PAGE or not available():
        return 0
    arena = torch.empty(total + 2 * PAGE, dtype=torch.uint8)
    base = arena.data_ptr()
    first = (base + PAGE - 1) // PAGE * PAGE - base
    if not _advise(base + first, (total + PAGE - 1) // PAGE * PAGE):
        return 0
    at = first
    for t, size in zip(todo, sizes):
        n = t.numel() * t.element_size()
        home = arena[at : at + n].view(t.dtype).view(t.shape)
        home.copy_(t)
        with torch.no_grad():
            t.set_(home.untyped_storage(), home.storage_offset(), t.shape, t.stride())
        at += size
    _PLACED[0] += total
    return total


def place_module(module: torch.nn.Module) -> int:
    """place() over the buffers and parameters `module` owns outright (its weights)."""
    return place([*module.buffers(), *module.parameters()])


def placed_bytes() -> int:
    return _PLACED[0]
