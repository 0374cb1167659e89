"""Kernel family bf16 (model.kernel=native_bf16, engines/kernels/family_bf16.h): bfloat16 weights,
activations rounded to bfloat16, one float32 chain per output in vdpbf16ps's order with its
flush of tiny results. Every build (the instruction where the CPU has AVX512-BF16, its emulation
on AVX-512, AVX2 and in portable C++) gives the same bits, on committed golden vectors and on
random ones, for a row alone or among up to 64."""

from __future__ import annotations

import math
import struct

import pytest
import torch

from engines import native

pytestmark = pytest.mark.usefixtures("one_thread")

INF, NAN = math.inf, math.nan
# name: (w, x, y's bits) for one output over 32 inputs (the rest zero); pair p is inputs 2p and
# 2p + 1, the odd product first. Made on an Intel Xeon (family 6 model 207) by vdpbf16ps.
GOLDEN = {
    # 2^-126 − 2^-150: exact with an unbounded exponent, so tiny: flushed, although the
    # subnormal grid would round it up to the smallest normal
    "flushed_below_min_after_rounding": ([-(2.0**-75), 2.0**-63], [2.0**-75, 2.0**-63], 0x00000000),
    "stays_min": ([-(2.0**-76), 2.0**-63], [2.0**-75, 2.0**-63], 0x00800000),
    # the odd product 2^-128 is flushed before the even one adds 2^-126
    "tiny_intermediate_flushed": ([2.0**-63, 2.0**-64], [2.0**-63, 2.0**-64], 0x00800000),
    "tiny_intermediate_kept_order": ([2.0**-64, 2.0**-63], [2.0**-64, 2.0**-63], 0x00A00000),
    "exact_cancellation": ([1.0, 1.0], [-1.0, 1.0], 0x00000000),
    "zero_products_sum_to_plus_zero": ([-1.0, 0.0], [0.0, 0.0], 0x00000000),
    "tie_to_even_down": ([1.0, 2.0**-24], [1.0, 1.0], 0x3F800000),
    "tie_to_even_up": ([1.0 + 2**-7, 2.0**-24], [1.0, 1.0], 0x3F810000),
    # acc = 1, then the odd 2^-24 (a tie, down), then the even 2^-24·(1 + 2^-7) (up): one ulp;
    # the even one first would give two
    "odd_before_even": (
        [0.0, 1.0, 2.0**-24 * (1 + 2**-7), 2.0**-24],
        [0.0, 1.0, 1.0, 1.0],
        0x3F800001,
    ),
    "catastrophic_cancellation": (
        [1.0 + 2**-7, 3.0, -3.0, 1.0],
        [1.0, 2.0**20, 2.0**20, 2.0**-20],
        0x3F800000,
    ),
    "overflow_to_inf": ([2.0**127, 2.0**127], [2.0, 2.0], 0x7F800000),
    "inf": ([INF, 1.0], [1.0, 1.0], 0x7F800000),
    "inf_minus_inf_is_nan": ([INF, INF], [-1.0, 1.0], None),
    "nan_weight": ([NAN, 1.0], [1.0, 1.0], None),
    "nan_activation": ([1.0, 1.0], [NAN, 1.0], None),
    "subnormal_activation_reads_zero": ([1.0, 1.0], [1e-39, 1.0], 0x3F800000),
    "subnormal_weight_flushed": ([1e-39, 1.0], [1.0, 1.0], 0x3F800000),
    "activation_rounded_to_bf16": ([1.0, 0.0], [1.0 + 2**-8, 0.0], 0x3F800000),
    "activation_rounded_tie_to_even": ([1.0, 0.0], [1.0 + 3 * 2**-8, 0.0], 0x3F820000),
}


def bits(t: torch.Tensor) -> list[int]:
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in t.flatten().tolist()]


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, a NaN equal to any NaN (their payloads are not part of the contract)."""
    return bool(((a.view(torch.int32) == b.view(torch.int32)) | (a.isnan() & b.isnan())).all())


@pytest.fixture(scope="module")
def builds():
    """Every build this CPU runs, and on a CPU with AVX512-BF16 also the AVX-512 build without
    the instruction (its emulation)."""
    out = {k: native.build(k) for k in native.supported()}
    if "avx512" in out and native.bf16_dot():
        out["avx512-emulated"] = native.build("avx512", bf16_dot=False)
        assert out["avx512"].isa().endswith("+bf16")
        assert not out["avx512-emulated"].isa().endswith("+bf16")
    return out


@pytest.mark.slow
def test_golden_vectors_on_every_build(builds):
    for name, (w, x, want) in GOLDEN.items():
        W, X = torch.zeros(1, 32), torch.zeros(1, 32)
        W[0, : len(w)], X[0, : len(x)] = torch.tensor(w), torch.tensor(x)
        for kind, mod in builds.items():
            y = mod.packed_linear(X, mod.repack_bf16(W.to(torch.bfloat16)), 1)
            if want is None:
                assert y.isnan().all(), (name, kind)
            else:
                assert bits(y) == [want], (name, kind, hex(bits(y)[0]))


@pytest.mark.slow
def test_every_build_gives_the_same_bits_alone_or_among_rows(builds):
    """Random weights and activations over 140 binades (tiny results, overflow, exact
    cancellation), N with a partial tile, M from 1 to 64: the portable build's bits on every
    build, and each row's bits the same alone as among the others."""
    ref = builds["portable"]
    g = torch.Generator().manual_seed(7)
    for trial, (n, k) in enumerate([(17, 64), (40, 96), (16, 576), (33, 1536)]):
        spread = 70 if trial % 2 else 4
        w = torch.randn(n, k, generator=g) * torch.exp2(
            torch.randint(-spread, spread, (n, k), generator=g).float()
        )
        w = w.to(torch.bfloat16)
        for m in (1, 2, 3, 7, 16, 17, 64):
            x = torch.randn(m, k, generator=g) * torch.exp2(
                torch.randint(-spread, spread, (m, k), generator=g).float()
            )
            x[:, 1::4] = -x[:, ::4]  # exact cancellations within pairs and across them
            want = ref.packed_linear(x, ref.repack_bf16(w), n)
            for kind, mod in builds.items():
                packed = mod.repack_bf16(w)
                y = mod.packed_linear(x, packed, n)
                assert same(y, want), (kind, n, k, m)
                if m > 1:
                    rows = [mod.packed_linear(x[i : i + 1].clone(), packed, n) for i in range(m)]
                    alone = torch.cat(rows)
                    assert same(alone, y), (kind, n, k, m)


def test_weights_and_activations_as_the_family_reads_them():
    """The repack keeps every weight but subnormals (a zero of their sign); the activations are
    rounded to nearest even as torch rounds to bfloat16, subnormals reading as zeros."""
    mod = native.kernels()[0]
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(37, 96, generator=g) * 0.1).to(torch.bfloat16)
    w[0, :4] = torch.tensor([1e-39, -1e-39, 0.0, -0.0]).to(torch.bfloat16)
    back = mod.unpack_bf16(mod.repack_bf16(w), 37)
    assert torch.equal(back[1:], w[1:]) and torch.equal(back[0, 4:], w[0, 4:])
    assert bits(back[0, :4].float()) == [0, 0x80000000, 0, 0x80000000]
    x = torch.randn(5, 96, generator=g)
    assert torch.equal(mod.round_bf16(x), x.to(torch.bfloat16))
    assert bits(mod.round_bf16(torch.tensor([1e-39, -1e-39])).float()) == [0, 0x80000000]


def test_products_are_the_exact_dot_product_to_float32_rounding():
    """Against a float64 product of the rounded values: the chain's float32 rounding only."""
    mod = native.kernels()[0]
    g = torch.Generator().manual_seed(1)
    w = (torch.randn(50, 576, generator=g) * 0.05).to(torch.bfloat16)
    x = torch.randn(9, 576, generator=g)
    y = mod.packed_linear(x, mod.repack_bf16(w), 50)
    exact = mod.round_bf16(x).double() @ w.double().t()
    assert float((y.double() - exact).abs().max()) <= 1e-5 * float(exact.abs().max())


def test_block_products_refuse_the_bf16_family():
    mod = native.kernels()[0]
    nib = torch.zeros(16, 16, dtype=torch.uint8)
    s = torch.ones(16, 1)
    with pytest.raises(ValueError, match="bfloat16 weights"):
        mod.q4_linear(torch.zeros(1, 32), nib, s, s, mod.Family.bf16)


# --- the family as the lean engine's kernel for 16-bit weights --------------------------------


def bf16_checkpoint(tiny_target_dir, tmp_path, dtype=torch.bfloat16):
    """The tiny model saved in `dtype` (its own weights rounded once)."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_target_dir, dtype=dtype)
    m.save_pretrained(tmp_path)
    import shutil

    for f in tiny_target_dir.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy(f, tmp_path / f.name)
    return tmp_path


def test_bfloat16_weights_run_on_the_family_and_agree_with_transformers(tiny_bf16_dir):
    """engine=lean model.weights=bfloat16 on a CPU: the bf16 family by default (float32
    activations, batch invariant, named), its logits within bfloat16 activation rounding of
    transformers' float32 forward over the same weights."""
    from engines.load import load

    ckpt = tiny_bf16_dir
    lean, choice = load(str(ckpt), "cpu", engine="lean", weights="bfloat16")
    assert native.integer_simd()  # the machines the suite runs on all have AVX2 at least
    assert (choice["kernel"], choice["dtype"], choice["batch_invariant"]) == (
        "native_bf16", "float32", True,
    )  # fmt: skip
    assert "chosen by the instruction set" in choice["kernel_probe"]["reason"]
    assert lean.model.native_stack() is not None  # the whole forward one native call
    hf, _ = load(str(ckpt), "cpu", engine="hf", dtype="float32")
    ids = torch.randint(4, 128, (1, 23), generator=torch.Generator().manual_seed(0))
    a = hf.forward(ids, hf.new_cache(64)).logits
    b = lean.forward(ids, lean.new_cache(64)).logits
    assert float((a - b).abs().max()) <= 0.02 * float(a.abs().max())


def test_float16_weights_widen_exactly_or_are_refused(tiny_target_dir, tmp_path):
    from engines.load import load
    from groundfloor.errors import UserError

    ckpt = bf16_checkpoint(tiny_target_dir, tmp_path / "fp16", dtype=torch.float16)
    refused = r"float16 tensor .* bfloat16 cannot hold .*=float16 or float32"
    with pytest.raises(UserError, match=refused):
        load(str(ckpt), "cpu", engine="lean", weights="bfloat16")
    # float16 weights that are all bfloat16 values load unchanged
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_target_dir, dtype=torch.bfloat16)
    m = m.to(torch.float16)
    m.save_pretrained(tmp_path / "exact")  # bfloat16 values as float16 (each one a bfloat16)
    m.to(torch.bfloat16).save_pretrained(tmp_path / "same")  # the same values as bfloat16
    lean, _ = load(str(tmp_path / "exact"), "cpu", engine="lean", weights="bfloat16")
    ref, _ = load(str(tmp_path / "same"), "cpu", engine="lean", weights="bfloat16")
    ids = torch.randint(4, 128, (1, 9), generator=torch.Generator().manual_seed(1))
    assert torch.equal(lean.forward(ids, lean.new_cache(16)).logits,
                       ref.forward(ids, ref.new_cache(16)).logits)  # fmt: skip


def test_the_bf16_kernel_is_refused_for_other_weights_in_one_line(tiny_target_dir):
    from engines.load import load
    from groundfloor.errors import UserError

    with pytest.raises(UserError, match="model.kernel=native_bf16 runs bfloat16 weights"):
        load(str(tiny_target_dir), "cpu", engine="lean", weights="int4", kernel="native_bf16")
    with pytest.raises(UserError, match="model.kernel=native_q8a runs int8/int4 weights"):
        load(str(tiny_target_dir), "cpu", engine="lean", weights="bfloat16", kernel="native_q8a")


@pytest.mark.slow
def test_the_embedded_models_16_bit_copy_is_built_once_and_memory_mapped(tmp_path, monkeypatch):
    """model.weights=bfloat16 on the embedded GGUF: each tensor of the file dequantized and
    rounded to bfloat16, cached by the file's hash, read back memory-mapped, and named."""
    from engines import bf16file, gguf
    from engines.load import load
    from groundfloor.models import embedded_gguf

    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path))
    path = embedded_gguf("embedded:smollm2-135m")
    first = bf16file.tensors(path)
    where = bf16file.cached(path)
    assert where.parent == tmp_path / "bf16" and bf16file.digest(path) in where.name
    stamp = where.stat().st_mtime_ns
    again = bf16file.tensors(path)
    assert where.stat().st_mtime_ns == stamp  # not rebuilt
    blocks, _ = gguf.read(path)
    name = "model.layers.3.mlp.down_proj.weight"
    assert torch.equal(again[name], blocks[name].dequantize().to(torch.bfloat16))
    assert all(t.dtype == torch.bfloat16 for t in first.values()) and set(first) == set(blocks)
    eng, choice = load("embedded:smollm2-135m", "cpu", weights="bfloat16")
    assert choice["kernel"] == "native_bf16" and choice["batch_invariant"]
    assert choice["source"].startswith("bf16 from the shipped Q4_1 file")


@pytest.mark.slow
def test_the_bf16_gguf_for_llama_cpp_holds_the_16_bit_copys_weights(tmp_path, monkeypatch):
    """engine_check's llama.cpp peer at 16 bits reads a BF16 GGUF of the very weights the 16-bit
    target runs: read back (rows unpermuted as for the Q4_1 file), every tensor equals the 16-bit
    copy's; quantized tensors are BF16, norms F32, the file type BF16."""
    import gguf as lib

    from engines import bf16file, bf16gguf, gguf
    from groundfloor.models import embedded_gguf

    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path))
    src = embedded_gguf("embedded:smollm2-135m")
    path = bf16gguf.written(src)
    assert path.name.endswith(".BF16.gguf") and bf16file.digest(src) in path.name
    back, meta = gguf.read(path)
    copy = bf16file.tensors(src)
    assert set(back) == set(copy)
    assert all(torch.equal(back[n], copy[n].float()) for n in copy)
    kinds = {t.name: t.tensor_type.name for t in lib.GGUFReader(str(path)).tensors}
    assert kinds["blk.0.ffn_down.weight"] == "BF16" and kinds["blk.0.attn_norm.weight"] == "F32"
    assert int(meta["general.file_type"]) == int(lib.LlamaFileType.MOSTLY_BF16)
