"""Learned drafters' linear layers in int8 on the native CPU kernels, where it pays here.

A drafting step on a CPU is a read of the drafter's weights for a few rows: an EAGLE-3 head (the
fused-feature fc, one decoder layer, its draft-vocabulary output layer) reads ~30 MB of float32
per step, against ~96 MB for the whole int4 target. Per-row symmetric int8 (engines.formats,
w = s[o]·q on engines/kernels/) reads a quarter of that, on the kernel the target's GGUF blocks
run on: int8 activations and integer products on repacked tiles (native_q8a) where the build has
integer SIMD, else float32 activations (native); chosen by the instruction set (`int8_kernel`).
It changes the drafter's numbers slightly, never what is accepted (the target verifies every
token).

    mode = choose(setting, weight, rows, device)   # "float" or "int8"
    quantize(module)                               # its nn.Linear layers → int8, native

`setting` is the run's `drafter_weights`: auto (int8 where the build has integer SIMD, AVX2 or
AVX-512, so that the layers run on native_q8a's integer products: chosen by the instruction set,
never by a clock, since the format changes which tokens are drafted; float elsewhere), float
(the drafter's stored values in the target's activation dtype), int8.
"""

from __future__ import annotations

import torch
from torch import nn

from engines import native
from engines.formats import GROUP, Linear
from engines.native import kernels
from groundfloor.errors import UserError

MODES = ("auto", "float", "int8")


def native_ready(device) -> bool:
    return torch.device(device).type == "cpu" and kernels()[0] is not None


def check(setting: str) -> None:
    """One error line for a `drafter_weights` value outside MODES (the run's validate() and
    choose() both ask here)."""
    if setting not in MODES:
        raise UserError(
            f"drafter_weights={setting!r} is not valid; choose one of: {', '.join(MODES)}"
        )


def choose(setting: str, weight: torch.Tensor, rows: int, device) -> str:
    """The format a drafter runs its linear layers in: "float" or "int8" (see the module doc)."""
    check(setting)
    if setting == "float":
        return "float"
    if not native_ready(device):
        if setting == "int8":
            why = kernels()[1] if torch.device(device).type == "cpu" else f"device {device}"
            raise UserError(
                f"drafter_weights=int8 needs the native CPU kernels ({why}); "
                "use drafter_weights=float or auto"
            )
        return "float"
    if setting == "int8" or native.integer_simd():
        return "int8"
    return "float"


def quantize(module: nn.Module) -> nn.Module:
    """Every nn.Linear inside `module` (whose input width the kernel's blocks divide) replaced
    by its int8 copy on the native kernels, in place."""
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear) and child.in_features % GROUP == 0:
            setattr(module, name, to_linear(child.weight, child.bias))
        else:
            quantize(child)
    return module


def int8_kernel() -> str:
    """The native kernel a drafter's int8 layers run on: native_q8a where the build has integer
    SIMD (AVX2, AVX-512), else native."""
    return "native_q8a" if native.integer_simd() else "native"


def to_linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> Linear:
    """A (out, in) matrix used as x @ weightᵀ (+ bias) as an int8 Linear on the native kernels."""
    b = None if bias is None else bias.detach().float()
    return Linear.from_float(weight.detach().float(), "int8", b, kernel=int8_kernel())
