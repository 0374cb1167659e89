"""Choosing and loading an engine: which engine, weight format, activation dtype and kernel.

    engine   auto   lean where the architecture is supported (engines.lean.SUPPORTED), else hf
    weights  auto   the checkpoint's own format: the embedded GGUF's Q4_1 blocks run as int4
                    (its shipped weights on the int4 kernel); a transformers checkpoint runs
                    unquantized in the activation dtype. int8/int4 on another checkpoint
                    quantize it (a different target, named in every result).
    dtype    auto   bfloat16 on a GPU; on a CPU, timed: each dtype the CPU computes natively
                    (float32 always; bfloat16 with avx512_bf16/amx_bf16; float16 with
                    avx512_fp16/amx_fp16) runs a one-token and an 8-token forward, and the
                    smallest geometric mean of the two wins.
    kernel   auto   float32 weights on a CPU: MKL's F.linear or oneDNN on prepacked weights,
                    whichever runs this model's projection shapes faster here (1 and 8 rows);
                    int8/int4 on a CPU: our native kernels (engines.native) where they build,
                    else torch's; anything else: torch's (aten). Of the native kernels, a GGUF
                    file's blocks run on native_q8a (the activations quantized to int8 per
                    block of 32 and integer products on weights repacked at load, as llama.cpp
                    runs the file) where the build has integer SIMD (AVX2 or AVX-512), chosen
                    by the instruction set, never by a clock; otherwise, and for weights
                    quantized here, on native (float32 activations, exact scales). bfloat16
                    weights on a CPU: native_bf16 (float32 activations rounded to bfloat16 in
                    each product, vdpbf16ps's arithmetic, emulated where the CPU lacks it)
                    where the build is vectorized, else torch's. All three are batch
                    invariant; they are different numbers, named in every result.
    The embedded GGUF at model.weights=bfloat16 is its 16-bit copy: every tensor dequantized
    once and rounded to bfloat16, cached by the file's hash (engines.bf16file).
Every choice and the timings behind it are returned as `choice` and land in env.json,
config.yaml and the summary rows; `choice["batch_invariant"]` says whether the result's rows are
(batch_invariant below).
"""

from __future__ import annotations

from pathlib import Path

import torch

from engines import bf16file, build, gguf, native
from engines.cpu import cpu_flags
from engines.formats import FLOATS, FORMATS, Linear, cuda_int4_tiles
from engines.hf import HFEngine
from engines.lean import LeanEngine, check_supported
from engines.probe import time_linear
from groundfloor.errors import UserError
from groundfloor.models import embedded_gguf, resolve_path

ENGINES = ("auto", "hf", "lean")
WEIGHTS = ("auto",) + FORMATS
DTYPES = ("auto",) + tuple(FLOATS)
KERNELS = ("auto", "aten", "onednn", *native.FAMILIES)
KV_DTYPES = ("auto", "float32", "bfloat16")  # the lean engine's KV cache; auto: the activations'


def native_dtypes(device: torch.device) -> list[str]:
    if device.type == "cuda":
        return ["bfloat16"]
    flags = cpu_flags()
    out = ["float32"]
    if flags & {"avx512_bf16", "amx_bf16"}:
        out.append("bfloat16")
    if flags & {"avx512_fp16", "amx_fp16"}:
        out.append("float16")
    return out


def _check(value, valid, key):
    if value not in valid:
        raise UserError(f"{key}={value!r} is not valid; choose one of: {', '.join(valid)}")


class Source:
    """Where a model's tensors come from: a transformers directory, maybe a GGUF file too."""

    def __init__(self, spec: str):
        self.spec = spec
        self.dir = resolve_path(spec)
        self.gguf = embedded_gguf(spec)  # the GGUF blocks behind an embedded:NAME, else None
        self._config = None

    @property
    def config(self):
        if self._config is None:
            from transformers import AutoConfig

            try:
                self._config = AutoConfig.from_pretrained(self.dir)
            except (OSError, ValueError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise UserError(
                    f"cannot load model {self.spec!r}: {first} (give an "
                    f"embedded:NAME, a Hugging Face id reachable online or in the "
                    f"local cache, or a directory)"
                )
        return self._config

    def local_dir(self) -> Path:
        p = Path(self.dir)
        if p.is_dir():
            return p
        from huggingface_hub import snapshot_download

        return Path(
            snapshot_download(self.dir, allow_patterns=["*.json", "*.safetensors", "*.bin"])
        )


def resolve_engine(source: Source, engine: str) -> tuple[str, str]:
    _check(engine, ENGINES, "engine")
    if engine == "hf":
        return "hf", "asked for"
    try:
        check_supported(source.config)
    except ValueError as e:
        if engine == "lean":
            raise UserError(str(e))
        return "hf", f"auto: {e}"
    return "lean", f"auto: model_type={source.config.model_type} is supported by the lean forward"


def resolve_weights(
    source: Source, engine: str, weights: str, dtype: str, device="cpu"
) -> tuple[str, str]:
    _check(weights, WEIGHTS, "model.weights")
    if engine == "hf":
        if weights not in ("auto", dtype):
            raise UserError(
                f"model.weights={weights!r} needs engine=lean (engine=hf runs the "
                f"checkpoint unquantized in model.dtype={dtype})"
            )
        return dtype, "engine=hf runs the checkpoint in model.dtype"
    cuda = torch.device(device).type == "cuda"
    if weights == "int4" and cuda:
        width = int(source.config.hidden_size)
        if cuda_int4_tiles(width) is None:
            raise UserError(
                f"model.weights=int4 on CUDA: torch's int4 kernel needs a width divisible by "
                f"32, this model's is {width}; use model.weights=auto (bfloat16) or int8"
            )
    if weights != "auto":
        return weights, "asked for"
    if source.gguf is not None and cuda:
        return dtype, (
            f"auto: on a GPU the GGUF blocks run dequantized in {dtype} (bandwidth is not what "
            "limits a 135M model there, and bfloat16 matmuls are the GPU's fast path); "
            "model.weights=int4 or int8 asks for the quantized kernels"
        )
    if source.gguf is not None:
        return (
            "int4",
            "auto: the checkpoint ships as GGUF Q4_1 blocks, which the int4 kernel "
            "runs as they are",
        )
    return dtype, "auto: the checkpoint's weights, unquantized in the activation dtype"


def build_engine(source: Source, engine: str, weights: str, dtype: str, device, kernel="aten"):
    tdtype = FLOATS[dtype]
    if engine == "hf":
        from transformers import AutoModelForCausalLM

        try:
            model = AutoModelForCausalLM.from_pretrained(source.dir, dtype=tdtype)
        except (OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"cannot load model {source.spec!r}: {first}")
        model.to(device).eval().requires_grad_(False)
        return HFEngine(model)
    if source.gguf is not None and weights == "int4":
        tensors, _ = gguf.read(source.gguf)
        where = f"GGUF blocks of {Path(source.gguf).name}"
    elif source.gguf is not None and weights == "bfloat16":
        tensors = bf16file.tensors(source.gguf)
        where = f"bf16 from the shipped {gguf_format(source.gguf)} file {Path(source.gguf).name}"
    else:
        tensors = build.state_dict_of(str(source.local_dir()))
        where = f"checkpoint tensors in {source.dir}"
    model = build.build(source.config, tensors, weights, tdtype, device, kernel)
    return LeanEngine(model, weights, where)


def gguf_format(path) -> str:
    """The GGUF file's weight format as its name says it (…​.Q4_1.gguf → Q4_1)."""
    parts = Path(path).name.split(".")
    return parts[-2] if len(parts) > 2 else "GGUF"


def choose_kernel(source: Source, weights: str, device, kernel: str) -> tuple[str, dict]:
    """The projections' kernel (see the module docstring), and why."""
    _check(kernel, KERNELS, "model.kernel")
    cpu = torch.device(device).type == "cpu"
    _check_kernel_fits(kernel, weights, cpu, device)
    if kernel != "auto":
        return kernel, {"reason": "asked for"}
    if cpu and weights == "bfloat16":
        mod, why = native.kernels()
        if mod is not None and native.integer_simd():
            how = "vdpbf16ps" if mod.isa().endswith("+bf16") else "its arithmetic emulated"
            return "native_bf16", {
                "reason": f"auto: bfloat16 weights on our bf16 kernel, batch invariant ({why}, "
                f"{mod.isa()}: {how}; chosen by the instruction set)"
            }
        return "aten", {
            "reason": f"auto: torch's bfloat16 kernels (our bf16 kernel: {why}, "
            "not vectorized here)"
        }
    if cpu and weights in ("int8", "int4"):
        mod, why = native.kernels()
        if mod is not None and source.gguf is not None and native.integer_simd():
            return "native_q8a", {
                "reason": f"auto: the GGUF's own blocks with int8 activations, as llama.cpp "
                f"runs them ({why}, {mod.isa()}; chosen by the instruction set)"
            }
        if mod is not None:
            return "native", {
                "reason": f"auto: our block kernels ({why}; float32 activations, exact scales)"
            }
        return "aten", {"reason": f"auto: the native kernels {why}"}
    if weights != "float32" or not cpu:
        return "aten", {
            "reason": "auto: torch's kernels (no alternative for these weights on this device)"
        }
    return _timed_float_kernel(source)


def _check_kernel_fits(kernel: str, weights: str, cpu: bool, device) -> None:
    """One error line for a model.kernel asked for weights or a device it does not run."""
    if kernel == "onednn" and not (cpu and weights == "float32"):
        raise UserError(
            f"model.kernel=onednn runs float32 weights on a CPU, not "
            f"{weights} on {torch.device(device).type}; use model.kernel=auto"
        )
    if kernel == "native_bf16" and not (cpu and weights == "bfloat16"):
        raise UserError(
            f"model.kernel=native_bf16 runs bfloat16 weights on a CPU, not {weights} on "
            f"{torch.device(device).type}; use model.kernel=auto"
        )
    if kernel in native.BLOCKS and not (cpu and weights in ("int8", "int4")):
        raise UserError(
            f"model.kernel={kernel} runs int8/int4 weights on a CPU, not "
            f"{weights} on {torch.device(device).type}; use model.kernel=auto"
        )
    if kernel in native.FAMILIES:
        mod, why = native.kernels()
        if mod is None:
            raise UserError(
                f"model.kernel={kernel}: the native kernels {why}; use model.kernel=aten"
            )


def _timed_float_kernel(source: Source) -> tuple[str, dict]:
    """float32 weights on a CPU: torch's (MKL) or oneDNN's products, whichever the model's
    projection shapes time faster at 1 and 8 rows."""
    c = source.config
    H, I = int(c.hidden_size), int(c.intermediate_size)
    hd = int(getattr(c, "head_dim", None) or H // c.num_attention_heads)
    shapes = [(hd * (c.num_attention_heads + 2 * c.num_key_value_heads), H), (2 * I, H), (H, I)]
    times = {}
    for k in ("aten", "onednn"):
        try:
            times[k] = _time_kernel(k, shapes)
        except RuntimeError as e:  # oneDNN missing from this build
            times[k] = None
            first = str(e).splitlines()[0]
            times[f"{k}_error"] = first
    ok = {k: v for k, v in times.items() if isinstance(v, float)}
    best = min(ok, key=ok.get)
    return best, {
        "reason": "timed: projection shapes at 1 and 8 rows",
        "seconds": {k: round(v, 5) for k, v in ok.items()},
    }


def _time_kernel(kernel: str, shapes) -> float:
    return time_linear(lambda w: Linear.from_float(w, "float32", kernel=kernel), shapes)


def choose_dtype(source: Source, engine: str, weights: str, dtype: str, device, kernel: str):
    """(dtype, evidence): asked for, the GPU's bfloat16, or chosen on the CPU by its instruction
    set and the path the weights take, never by a clock (the dtype changes the numbers, so a
    choice that followed the machine's load could change them from run to run):
      - the native kernels (GGUF and int8/int4 weights on engine=lean): float32, the
        activations they take (native_q8a quantizes them per block itself);
      - other paths (engine=hf, float weights): bfloat16 where the CPU computes it natively
        (avx512_bf16, AMX: measured 1.4× float32's generate() on Zen 4, FACTS), else float32."""
    _check(dtype, DTYPES, "model.dtype")
    if dtype != "auto":
        return dtype, {"reason": "asked for"}
    device = torch.device(device)
    if device.type == "cuda":
        return "bfloat16", {"reason": "auto: bfloat16 on a GPU"}
    cands = native_dtypes(device)
    flags = sorted(
        cpu_flags() & {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16", "avx512f", "avx2"}
    )
    seen = f"(flags: {' '.join(flags) or 'none'})"
    if len(cands) == 1:
        return cands[0], {"reason": f"auto: the only dtype this CPU computes natively {seen}"}
    if weights == "bfloat16" and engine == "lean":
        k = choose_kernel(source, weights, device, kernel)[0]
        if k == "native_bf16":
            return "float32", {
                "reason": f"auto: float32, the activations model.kernel={k} takes (each "
                f"product rounds them to bfloat16 itself) {seen}"
            }
    if weights in FLOATS:
        return weights, {"reason": f"auto: model.weights={weights}, computed as stored {seen}"}
    if engine == "lean":
        w, _ = resolve_weights(source, engine, weights, "float32", device)
        k = choose_kernel(source, w, device, kernel)[0] if w in ("int8", "int4") else None
        if k in native.FAMILIES:
            return "float32", {
                "reason": f"auto: float32, the activations model.kernel={k} takes {seen}"
            }
    pick = "bfloat16" if "bfloat16" in cands else cands[0]
    return pick, {"reason": f"auto: {pick}, computed natively by this CPU {seen}"}


def load(
    spec: str,
    device,
    engine: str = "auto",
    weights: str = "auto",
    dtype: str = "auto",
    kernel: str = "auto",
    compile: bool = False,
    kv_dtype: str = "auto",
):
    """(engine object, choice): `choice` records what was resolved and why."""
    _check(kv_dtype, KV_DTYPES, "model.kv_dtype")
    source = Source(spec)
    device = torch.device(device)
    eng_name, eng_why = resolve_engine(source, engine)
    dt, dt_why = choose_dtype(source, eng_name, weights, dtype, device, kernel)
    w, w_why = resolve_weights(source, eng_name, weights, dt, device)
    k, k_why = (
        choose_kernel(source, w, device, kernel)
        if eng_name == "lean"
        else ("transformers", {"reason": "engine=hf"})
    )
    eng = build_engine(source, eng_name, w, dt, device, k)
    kv, kv_why = _kv_dtype(eng, eng_name, kv_dtype)
    if compile:
        if eng_name != "lean":
            raise UserError(
                "model.compile=true needs engine=lean (engine=hf runs transformers as is)"
            )
        eng.compile()
    choice = {
        "engine": eng_name,
        "engine_reason": eng_why,
        "weights": w,
        "weights_reason": w_why,
        "dtype": dt,
        "dtype_probe": dt_why,
        "kernel": k,
        "kernel_probe": k_why,
        "kv_dtype": kv,
        "kv_dtype_reason": kv_why,
        "batch_invariant": batch_invariant(eng_name, k, dt),
        **eng.describe(),
    }
    return eng, choice


def batch_invariant(engine: str, kernel: str, dtype: str = "float32") -> bool:
    """Whether a row's logits are the same bits alone or among other rows (a verify of 64 tree
    nodes, a batch): the lean engine on the native kernels, whose every product, attention and
    norm runs in one order per row whatever the row count (engines/kernels/contract.h, the README's
    "Engines, weights and dtype"). transformers' forward and torch's kernels (aten, oneDNN: e.g.
    model.weights=bfloat16) choose blockings by shape, so they are not. The greedy verdict reads
    it: where it holds, any divergence is a mismatch (bench.outputs.verdict)."""
    return engine == "lean" and kernel in native.FAMILIES and dtype == "float32"


def _kv_dtype(eng, engine: str, asked: str) -> tuple[str, str]:
    """The KV cache's dtype (model.kv_dtype), set on a lean engine, and why."""
    if engine != "lean":
        if asked != "auto":
            raise UserError(
                f"model.kv_dtype={asked} needs engine=lean (engine={engine} keeps the cache "
                "transformers gives it); use model.kv_dtype=auto"
            )
        return str(eng.dtype).removeprefix("torch."), "engine=hf: transformers' own cache"
    if asked == "auto":
        return str(eng.kv_dtype).removeprefix("torch."), "auto: the activations' dtype"
    eng.kv_dtype = FLOATS[asked]
    return asked, "asked (model.kv_dtype)"


def wrap(model, engine: str = "hf", weights: str | None = None, kernel: str = "aten"):
    """An engine over an in-memory transformers model (tests, training): hf as is, or a lean
    model built from its state dict in `weights` (default: its own dtype)."""
    if engine == "hf":
        return HFEngine(model)
    p = next(model.parameters())
    fmt = weights or str(p.dtype).removeprefix("torch.")
    lean = build.build(model.config, dict(model.state_dict()), fmt, p.dtype, p.device, kernel)
    return LeanEngine(lean, fmt, "an in-memory transformers model")
