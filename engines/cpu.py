"""What this CPU computes natively: its flags, read once from /proc/cpuinfo.

The engines choose dtypes (engines/load.py) and build kernels (engines/native.py) from these;
records name the flags that matter next to every figure.
"""

from __future__ import annotations

from functools import cache

FLAGS_THAT_MATTER = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
    "avx_vnni",
)


@cache
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@cache
def cpu_kind() -> str:
    """The CPU's model name, family and model numbers, and the flags that matter, e.g.
    'AMD EPYC (family 25, model 1) avx2 fma': two kinds may share a model name ("AMD EPYC" is
    Zen 3 and Zen 4 alike), so figures measured on one are keyed by all of it."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip() and fields:
                    break
    except OSError:
        pass
    import platform

    name = fields.get("model name") or platform.processor() or platform.machine()
    numbers = (
        f" (family {fields['cpu family']}, model {fields['model']})"
        if "cpu family" in fields and "model" in fields
        else ""
    )
    flags = " ".join(f for f in FLAGS_THAT_MATTER if f in cpu_flags())
    return f"{name}{numbers} {flags}".strip()


# llama.cpp's build (make install-llamacpp): GGML option → the /proc/cpuinfo flags it needs.
# llama-cpp-python 0.3.36 built with GGML_NATIVE on an AMX Xeon (family 6 model 167) used the
# AMX backend for the embedded Q4_1 file and segfaulted on the first decode; built from these
# flags (GGML_NATIVE off, each instruction set by name, the AMX backend off) it runs.
GGML_OPTIONS = (
    ("GGML_AVX", {"avx"}),
    ("GGML_AVX2", {"avx2"}),
    ("GGML_FMA", {"fma"}),
    ("GGML_F16C", {"f16c"}),
    ("GGML_AVX_VNNI", {"avx_vnni"}),
    ("GGML_AVX512", {"avx512f", "avx512bw", "avx512dq", "avx512vl"}),
    ("GGML_AVX512_VBMI", {"avx512f", "avx512vbmi"}),
    ("GGML_AVX512_VNNI", {"avx512f", "avx512_vnni"}),
    ("GGML_AVX512_BF16", {"avx512f", "avx512_bf16"}),
)
GGML_OFF = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def llamacpp_cmake_args(flags: frozenset[str] | None = None) -> str:
    """CMAKE_ARGS for llama.cpp on this CPU (or one with `flags`), chosen from its flags."""
    flags = cpu_flags() if flags is None else flags
    on = [f"-D{opt}={'ON' if need <= flags else 'OFF'}" for opt, need in GGML_OPTIONS]
    return " ".join(["-DGGML_NATIVE=OFF", *on, *(f"-D{opt}=OFF" for opt in GGML_OFF)])
