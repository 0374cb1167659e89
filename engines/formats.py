"""Weight formats of one linear layer, and the kernels each can run on.

    y = x Wᵀ (+ b),   x (..., in) in the activation dtype, y in the same dtype

    format    values                                        kernels
    float32   (out, in) float32                             aten (F.linear, MKL), onednn
                                                            (prepacked weights, CPU)
    bfloat16  (out, in) bfloat16                            native_bf16 (float32 activations
                                                            rounded to bf16 per product, a
                                                            float32 chain: exact, batch
                                                            invariant), aten
    float16   (out, in) float16                             aten
    int8      one scale per output row: w = s[o]·q, q int8  native (float32 activations),
                                                            aten (_weight_int8pack_mm, bf16)
    int4      groups of 32 along `in`, asymmetric:          native (float32 scales and
              w = scale[o, g]·q + offset[o, g], q ∈ 0..15   activations: exact values),
                                                            aten (_weight_int4pack_mm*, bf16:
                                                            scales rounded to bf16)
    q8_0      groups of 32, symmetric: w = d[o, g]·q        native only (GGUF's Q8_0 blocks)

The native kernels are engines/kernels/ (engines.native), one kernel family per model.kernel
value (engines.native.FAMILIES), float32 in and out, each output a fixed sequence of operations
whatever the number of input rows, so a verify forward gives each token the same numbers as a
one-token forward. "native" (family f32) takes the activations as they are, on the blocks as
stored here (nibbles, float32 scales). "native_q8a" (family q8a) quantizes the activations to
int8 per block of 32 (llama.cpp's Q8_1 scheme) and multiplies integers, on weights repacked at
load into tiles of 16 output rows (one `packed` buffer: int4 scales and offsets in float16, as a
GGUF Q4_1 file has them; int8/q8_0 scales in float32): other numbers than "native", the default
for a GGUF file's blocks where the CPU has AVX2 or AVX-512 (engines.load). "native_bf16" (family
bf16) runs bfloat16 weights, repacked at load into tiles of 16 output rows, with the activations
rounded to bfloat16 and vdpbf16ps's arithmetic (emulated bit for bit where the CPU lacks it).
The aten int8/int4 kernels take bfloat16 activations (their fast CPU path): x is cast to bf16
and y back. A GGUF Q4_1 block (w = d·q + m) is an int4 group with scale d and offset m, as
stored; Q8_0 blocks are q8_0. Weight-only quantization changes the target's numbers, so format
and kernel are named next to every result.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from engines import native

FLOATS = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
QUANTIZED = ("int8", "int4")
FORMATS = tuple(FLOATS) + QUANTIZED
GROUP = 32
NATIVE = tuple(native.FAMILIES)  # our kernels (engines.native): the same weight layout


def cuda_int4_tiles(in_features: int) -> int | None:
    """innerKTiles for torch's CUDA int4 packing: the kernel needs in_features divisible by
    16 × innerKTiles (8 × 16 = 128 does not divide SmolLM2's 576 = 9 × 64); the largest of 8, 4,
    2 that fits, None when none does."""
    return next((t for t in (8, 4, 2) if in_features % (16 * t) == 0), None)


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: (q (out, in) int8, scale (out,) float32), w ≈ scale · q."""
    w = w.float()
    scale = (w.abs().amax(dim=1) / 127).clamp_min(1e-12)
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def quantize_int4(w: torch.Tensor, group: int = GROUP):
    """Asymmetric min/max int4 in groups of `group` along `in`:
    (q (out, in) uint8 ∈ 0..15, scale (out, in/g), offset (out, in/g)), w ≈ scale·q + offset."""
    o, i = w.shape
    g = w.float().view(o, i // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / 15).clamp_min(1e-12)
    q = torch.round((g - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.uint8)
    return q.view(o, i), scale, lo


def pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """(out, in) values 0..15 → (out, in/2) bytes in GGUF's order: byte j of a block of 32 holds
    element j (low nibble) and element j + 16 (high nibble)."""
    o, i = q.shape
    b = q.to(torch.uint8).view(o, i // GROUP, 2, GROUP // 2)
    return (b[:, :, 0] | (b[:, :, 1] << 4)).reshape(o, i // 2).contiguous()


def _native():
    return native.kernels()[0]


class Linear(nn.Module):
    """One projection in a weight format, run on one kernel."""

    def __init__(
        self,
        fmt: str,
        kernel: str,
        shape: tuple[int, int],
        tensors: dict,
        bias: torch.Tensor | None,
    ):
        super().__init__()
        self.fmt, self.kernel = fmt, kernel
        self.out_features, self.in_features = shape
        for name, t in tensors.items():
            self.register_buffer(name, t, persistent=False)
        self.register_buffer("bias", bias, persistent=False)
        if kernel in NATIVE and _native() is None:
            raise RuntimeError(f"the native kernels are unavailable: {native.kernels()[1]}")

    # --- construction -----------------------------------------------------------------------
    @classmethod
    def from_float(
        cls, w: torch.Tensor, fmt: str, bias=None, device="cpu", kernel: str = "aten"
    ) -> "Linear":
        """A float (out, in) weight in format `fmt` (quantized here for int8/int4)."""
        if fmt not in FORMATS:
            raise ValueError(f"weight format {fmt!r}; choose one of {', '.join(FORMATS)}")
        if fmt == "int4":
            return cls.from_int4(*quantize_int4(w), bias=bias, device=device, kernel=kernel)
        shape = tuple(w.shape)
        b = None if bias is None else bias.to(device)
        if fmt == "int8":
            q, s = quantize_int8(w)
            if kernel in NATIVE:  # the row's scale for each of its groups: the same values
                groups = s[:, None].expand(-1, shape[1] // GROUP).contiguous()
                if native.repacked(kernel):
                    return cls("int8", kernel, shape, {"packed": _native().repack_q8(q, groups)}, b)
                return cls(
                    "int8", kernel, shape, {"qweight": q.to(device), "scales": groups.to(device)}, b
                )
            return cls(
                "int8",
                "aten",
                shape,
                {"qweight": q.to(device), "scales": s.to(device, torch.bfloat16)},
                b,
            )
        if kernel == "native_bf16":  # bfloat16 weights on family bf16's tiles, repacked once
            if fmt != "bfloat16":
                raise ValueError(f"model.kernel=native_bf16 runs bfloat16 weights, not {fmt}")
            packed = _native().repack_bf16(w.to(torch.bfloat16).contiguous())
            return cls(fmt, kernel, shape, {"packed": packed}, b)
        w = w.to(device=device, dtype=FLOATS[fmt]).contiguous()
        if kernel == "onednn":
            return cls(
                fmt, kernel, shape, {"weight": torch.ops.mkldnn._reorder_linear_weight(w, 1)}, b
            )
        return cls(fmt, "aten", shape, {"weight": w}, b)

    @classmethod
    def from_int4(
        cls,
        q: torch.Tensor,
        scale: torch.Tensor,
        offset: torch.Tensor,
        bias=None,
        device="cpu",
        kernel: str = "native",
    ) -> "Linear":
        """q (out, in) ∈ 0..15, scale and offset (out, in/32): w = scale·q + offset."""
        o, i = q.shape
        if i % GROUP:
            raise ValueError(f"int4 needs in_features divisible by {GROUP}, got {i}")
        dev = torch.device(device)
        b = None if bias is None else bias.to(dev)
        if native.repacked(kernel):  # repacked once, here (family q8a's tiles)
            t = {"packed": _native().repack_q4(pack_nibbles(q), scale.float(), offset.float())}
            return cls("int4", kernel, (o, i), t, b)
        if kernel in NATIVE:
            t = {
                "nib": pack_nibbles(q).to(dev),
                "scale": scale.float().contiguous().to(dev),
                "offset": offset.float().contiguous().to(dev),
            }
            return cls("int4", kernel, (o, i), t, b)
        zero = offset + 8 * scale  # the aten kernels compute (q − 8)·scale + zero
        sz = torch.stack([scale.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()
        if dev.type == "cuda":
            pairs = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8).to(dev)
            packed = torch.ops.aten._convert_weight_to_int4pack(pairs, cuda_int4_tiles(i))
        else:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)
        return cls("int4", "aten", (o, i), {"packed": packed.to(dev), "sz": sz.to(dev)}, b)

    @classmethod
    def from_q8_0(
        cls, q: torch.Tensor, d: torch.Tensor, device="cpu", kernel: str = "native"
    ) -> "Linear":
        """GGUF Q8_0 blocks (w = d·q per group of 32) as they are on the native kernel; on
        aten, requantized to int8 per row (what that kernel takes)."""
        if kernel not in NATIVE:
            w = (q.view(q.shape[0], -1, GROUP).float() * d[..., None]).view(q.shape)
            return cls.from_float(w, "int8", device=device, kernel="aten")
        if native.repacked(kernel):
            return cls("q8_0", kernel, tuple(q.shape), {"packed": _native().repack_q8(q, d)}, None)
        return cls(
            "q8_0",
            kernel,
            tuple(q.shape),
            {"qweight": q.contiguous().to(device), "scales": d.float().contiguous().to(device)},
            None,
        )

    # --- use ----------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if self.kernel in NATIVE:
            xf, mod, fam = x2.float().contiguous(), _native(), native.family(self.kernel)
            if native.repacked(self.kernel):
                y = mod.packed_linear(xf, self.packed, self.out_features)
            elif self.fmt == "int4":
                y = mod.q4_linear(xf, self.nib, self.scale, self.offset, fam)
            else:
                y = mod.q8_linear(xf, self.qweight, self.scales, fam)
        elif self.fmt in FLOATS:
            if self.kernel == "onednn":
                y = torch.ops.mkldnn._linear_pointwise(
                    x2.to(torch.float32), self.weight, None, "none", [], ""
                )
            else:
                y = F.linear(x2.to(self.weight.dtype), self.weight)
        elif self.fmt == "int8":
            xb = x2.to(torch.bfloat16)
            if xb.is_cuda:
                y = F.linear(xb, self.qweight.to(torch.bfloat16)) * self.scales
            else:
                y = torch.ops.aten._weight_int8pack_mm(xb, self.qweight, self.scales)
        else:
            xb = x2.to(torch.bfloat16)
            if xb.is_cuda:
                y = torch.ops.aten._weight_int4pack_mm(xb, self.packed, GROUP, self.sz)
            else:
                y = torch.ops.aten._weight_int4pack_mm_for_cpu(xb, self.packed, GROUP, self.sz)
        y = y.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias.to(x.dtype)
        return y.view(*shape[:-1], self.out_features)

    def dequantized(self) -> torch.Tensor:
        """The weight as the kernel applies it, (out, in) float32 (tests and drafters)."""
        o, i = self.out_features, self.in_features
        if self.kernel == "native_bf16":
            return _native().unpack_bf16(self.packed, o).float()
        if native.repacked(self.kernel):
            q, d, m = _native().unpack(self.packed, o)
            return (q.float().view(o, i // GROUP, GROUP) * d[..., None] + m[..., None]).view(o, i)
        if self.kernel in NATIVE:
            if self.fmt == "int4":
                lo, hi = self.nib & 0x0F, self.nib >> 4
                q = torch.cat(
                    [lo.view(o, i // GROUP, GROUP // 2), hi.view(o, i // GROUP, GROUP // 2)], -1
                ).float()
                return (q * self.scale[..., None] + self.offset[..., None]).view(o, i)
            return (self.qweight.float().view(o, i // GROUP, GROUP) * self.scales[..., None]).view(
                o, i
            )
        if self.fmt in FLOATS and self.kernel == "aten":
            return self.weight.float()
        if self.fmt == "int8":
            return self.qweight.float() * self.scales.float()[:, None]
        # int4 on aten (bf16 output) and prepacked oneDNN: apply the kernel to the identity
        dev = self.sz.device if self.fmt == "int4" else "cpu"
        bias, self.bias = self.bias, None
        try:
            return self.forward(torch.eye(i, device=dev)).t().contiguous().float()
        finally:
            self.bias = bias

    def nbytes(self) -> int:
        n = 0
        for name, t in self.named_buffers():
            if t is not None:
                n += (
                    self.out_features * self.in_features * 4
                    if t.is_mkldnn
                    else t.numel() * t.element_size()
                )
        return n

    def extra_repr(self) -> str:
        return f"{self.in_features} → {self.out_features}, {self.fmt}, kernel={self.kernel}"
