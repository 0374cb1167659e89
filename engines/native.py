"""Our CPU kernels (engines/kernels/), built on first use: block-quantized matrix products and
the per-row layer ops of the lean forward (norm, rotary, attention, SiLU·mul).

    mod, why = native.kernels()      # the compiled module, or None and the reason
    mod.q4_linear(x, nib, scale, offset, family("native"))   # a product in a kernel family
    mod.packed_linear(x, mod.repack_q4(nib, scale, offset), N)   # native_q8a's, repacked once

engines/kernels/ is one translation unit, bindings.cpp, and the headers it includes (contract.h
states the numbers every build keeps). It is compiled once per machine kind by torch's C++
extension loader (a minute on two cores) into $SPECSWEEP_KERNELS (default
~/.cache/specsweep-kernels), in a folder named by a hash of every file of engines/kernels/, the
flags and torch's version, and reused afterwards: a built module is imported as it is, so
another checkout of the same source (a clean clone, CI) does not rebuild it, and an edited
header builds afresh.

With AVX-512 it is built for AVX-512 (with VNNI and BW where the CPU has them: the integer
products of model.kernel=native_q8a, 16 output rows per vpdpbusd; with AVX512-BF16 where it
has that: model.kernel=native_bf16's vdpbf16ps, which the other builds emulate), with AVX2 and
FMA for AVX2, otherwise as portable C++; every build does the same operations in the same order
(contract.h; no fma is fused that the source does not write: -ffp-contract=off), so all give the
same bits.
SPECSWEEP_ISA=avx2|portable asks for a narrower build (to compare them on one machine);
SPECSWEEP_LAYER_CALL=0 runs the lean forward's layers op by op instead of one call for the whole
forward. Where no compiler is available the engine falls back to torch's own int4/int8
kernels, and says so in `describe()`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

from engines.cpu import cpu_flags

FOLDER = Path(__file__).parent / "kernels"  # every file in it goes into the build's hash
SOURCE = FOLDER / "bindings.cpp"  # the translation unit: it includes the rest
_STATE: dict = {}

# model.kernel → the kernel family that runs it: the module's `Family` enum (engines/kernels/
# contract.h states each one's arithmetic). A new family: its file and rows in engines/kernels/
# (linear.h says which), a row here, its tests.
FAMILIES = {"native": "f32", "native_q8a": "q8a", "native_bf16": "bf16"}
# the families whose weights are repacked at load into their own tiles (contract.h: R4, R8, RB)
REPACKED = {"q8a", "bf16"}
# the families of block-quantized weights (int4, int8, q8_0); bf16 runs bfloat16 weights
BLOCKS = ("native", "native_q8a")


def repacked(kernel: str) -> bool:
    """Whether model.kernel=`kernel` runs weights repacked at load (packed_linear)."""
    return FAMILIES.get(kernel) in REPACKED


# -ffp-contract=off: no a·b + c fused where the source does not say fma, so that a build with
# FMA instructions rounds as the portable one does (contract.h)
BASE = ["-O3", "-fopenmp", "-ffp-contract=off"]
AVX2 = [*BASE, "-mavx2", "-mfma", "-mf16c"]
# -mavx512vl: 32 registers for 8-lane vectors too (attention.h keeps three heads' output
# accumulators in them)
FLAGS = {"avx512": [*AVX2, "-mavx512f", "-mavx512vl"], "avx2": AVX2, "portable": BASE}
VNNI = ["-mavx512bw", "-mavx512vnni"]  # native_q8a's integer products, where the CPU has them
BF16 = ["-mavx512bf16"]  # native_bf16's vdpbf16ps, where the CPU has it (others emulate it)
ORDER = ("avx512", "avx2", "portable")  # widest first


def supported() -> list[str]:
    """The builds this CPU runs, widest first."""
    flags = cpu_flags()
    ok = {"portable"}
    if {"avx2", "fma"} <= flags:
        ok.add("avx2")
        if {"avx512f", "avx512vl"} <= flags:
            ok.add("avx512")
    return [k for k in ORDER if k in ok]


def vnni() -> bool:
    """Whether the AVX-512 build also gets the 512-bit integer dot products (VNNI, BW) that
    model.kernel=native_q8a uses; without them it multiplies its integers 256 bits at a time."""
    return {"avx512bw", "avx512_vnni"} <= cpu_flags()


def bf16_dot() -> bool:
    """Whether the AVX-512 build also gets vdpbf16ps (AVX512-BF16) for model.kernel=native_bf16;
    without it every build emulates the instruction's arithmetic (the same bits)."""
    return "avx512_bf16" in cpu_flags()


def extra() -> list[str]:
    """The AVX-512 build's flags past AVX-512F/VL: what this CPU has of VNNI/BW and BF16."""
    return (VNNI if vnni() else []) + (BF16 if bf16_dot() else [])


def _kind() -> str:
    ask = os.environ.get("SPECSWEEP_ISA")
    kinds = supported()
    if ask and ask not in kinds:
        raise ValueError(f"SPECSWEEP_ISA={ask!r}: this CPU runs {', '.join(kinds)}")
    return ask or kinds[0]


def integer_simd() -> bool:
    """Whether the build has integer SIMD (AVX2 or AVX-512) for the int8-activation products
    (family q8a); the portable build multiplies them in plain loops."""
    mod, _ = kernels()
    return mod is not None and mod.isa() != "portable"


def family(kernel: str):
    """The module's Family value for model.kernel=`kernel` (one of FAMILIES), to pass to its
    products and its one-call layer."""
    return getattr(kernels()[0].Family, FAMILIES[kernel])


def layer_call() -> bool:
    """Whether the lean forward runs a layer as one native call (layer_, the default) or op by
    op (SPECSWEEP_LAYER_CALL=0: the same numbers, to compare their speed)."""
    return os.environ.get("SPECSWEEP_LAYER_CALL", "1") != "0"


def kernels():
    """(module, reason): the compiled kernels, or (None, why not)."""
    if "mod" in _STATE:
        return _STATE["mod"], _STATE["why"]
    if os.environ.get("SPECSWEEP_NATIVE", "1") == "0":
        _STATE.update(mod=None, why="disabled by SPECSWEEP_NATIVE=0")
        return None, _STATE["why"]
    try:
        kind = _kind()
        mod = build(kind)
        _STATE.update(mod=mod, why=f"built {kind}")
    except Exception as e:  # no compiler, no headers: torch's kernels remain
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        _STATE.update(mod=None, why=f"could not build ({first[:200]})")
    return _STATE["mod"], _STATE["why"]


def build(kind: str, bf16_dot: bool = True):
    """The module built for `kind` (one of FLAGS), compiled on first use and reused after;
    bf16_dot=False: an AVX-512 build without vdpbf16ps even where the CPU has it (the tests
    compare its emulation with the instruction)."""
    from torch.utils.cpp_extension import load

    more = extra() if kind == "avx512" else []
    cflags = FLAGS[kind] + [f for f in more if bf16_dot or f not in BF16]
    name = f"specsweep_cpu_{kind}_{digest(kind, cflags)}"
    # its own folder, not under $SPECSWEEP_CACHE (tests point that at temporary folders)
    folder = (
        Path(os.environ.get("SPECSWEEP_KERNELS", Path.home() / ".cache" / "specsweep-kernels"))
        / name
    )
    built = folder / f"{name}.so"
    if built.exists() and not (folder / "lock").exists():
        return _import(name, built)
    folder.mkdir(parents=True, exist_ok=True)
    return load(
        name=name,
        sources=[str(SOURCE)],
        extra_cflags=cflags,
        extra_ldflags=["-fopenmp"],
        build_directory=str(folder),
        verbose=False,
    )


def digest(kind: str, cflags: list[str]) -> str:
    """What names a build: every file of engines/kernels/ (an edited header builds afresh), the
    build's kind and flags, and torch's version; 12 hex digits."""
    import torch

    h = hashlib.sha256()
    for path in sorted(p for p in FOLDER.iterdir() if p.is_file()):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(" ".join([kind, *cflags, torch.__version__]).encode())
    return h.hexdigest()[:12]


def _import(name: str, path: Path):
    """The extension module built earlier at `path` (its init function is named after `name`)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
