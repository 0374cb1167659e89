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
