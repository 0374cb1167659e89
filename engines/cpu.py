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
