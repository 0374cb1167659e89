"""The lean engine against the hf engine (transformers as is), on tiny real models.

Logits at every position of a prompt and of a tree-masked forward, hidden states, greedy
outputs, cache rollback and path keeping, and the int8/int4 weight formats.
"""

from __future__ import annotations

import pytest
import torch

from engines.base import tree_mask
from engines.load import load
from groundfloor.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")


def engines(path, dtype="float32", weights=None):
    hf, _ = load(str(path), "cpu", engine="hf", dtype=dtype)
    lean, _ = load(
        str(path), "cpu", engine="lean", dtype=dtype, weights=weights or dtype, kernel="aten"
    )
    return hf, lean


def close(a, b, rel):
    a, b = a.float(), b.float()
    return float((a - b).abs().max()) <= rel * float(b.abs().max())


@pytest.fixture(scope="module")
def pair(tiny_target_dir):
    return engines(tiny_target_dir)


def prompt(n=23, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 128, (1, n), generator=g)


def test_lean_matches_hf_logits_at_every_position(pair):
    hf, lean = pair
    ids = prompt()
    a = hf.forward(ids, hf.new_cache(64), hidden=(0, 1, 2, -1))
    b = lean.forward(ids, lean.new_cache(64), hidden=(0, 1, 2, -1))
    assert a.logits.shape == b.logits.shape == (1, 23, 128)
    assert close(b.logits, a.logits, 1e-4)
    for l in (0, 1, 2, -1):
        assert close(b.hidden[l], a.hidden[l], 1e-4), l
    assert torch.equal(b.hidden[2], b.hidden[-1])  # 2 layers: index N is the final norm


def test_lean_matches_hf_incrementally_and_on_a_tree(pair):
    hf, lean = pair
    ids = prompt(30, seed=1)
    caches = [e.new_cache(64) for e in pair]
    for e, c in zip(pair, caches):
        e.forward(ids[:, :20], c)
    # a tree of 6 nodes below the root ids[20]: parents (rows) 0,0,1,1,2,4
    parents = [0, 0, 1, 1, 2, 4]
    anc = torch.eye(7, dtype=torch.bool)
    depth = torch.zeros(7, dtype=torch.long)
    for j, p in enumerate(parents, start=1):
        anc[j] |= anc[p]
        depth[j] = depth[p] + 1
    toks = ids[:, 20:27]
    outs = [
        e.forward(toks, c, positions=(20 + depth)[None], mask=tree_mask(anc, 20))
        for e, c in zip(pair, caches)
    ]
    assert close(outs[1].logits, outs[0].logits, 1e-4)
    # row 3 (root → row 1 → row 3) equals decoding that path sequentially
    path = [0, 1, 3]
    fresh = lean.new_cache(64)
    seq = lean.forward(torch.cat([ids[:, :20], toks[:, path]], 1), fresh).logits[0, -1]
    assert close(outs[1].logits[0, 3], seq, 1e-4)


def test_keep_path_equals_a_fresh_prefill(pair):
    for e in pair:
        ids = prompt(26, seed=2)
        c = e.new_cache(64)
        e.forward(ids[:, :20], c)
        parents = [0, 0, 1, 2, 3]
        anc = torch.eye(6, dtype=torch.bool)
        depth = torch.zeros(6, dtype=torch.long)
        for j, p in enumerate(parents, start=1):
            anc[j] |= anc[p]
            depth[j] = depth[p] + 1
        e.forward(ids[:, 20:26], c, positions=(20 + depth)[None], mask=tree_mask(anc, 20))
        c.keep(20, torch.tensor([0, 1, 3]))  # root, node row 1, node row 3
        assert c.length == 23
        nxt = torch.tensor([[7]])
        after = e.forward(nxt, c).logits[0, -1]
        kept = torch.cat([ids[:, 20:21], ids[:, 21:22], ids[:, 23:24], nxt], 1)
        fresh = e.forward(torch.cat([ids[:, :20], kept], 1), e.new_cache(64)).logits[0, -1]
        assert close(after, fresh, 1e-5), e.name
        c.crop(21)  # roll back to root only
        again = e.forward(nxt, c).logits[0, -1]
        ref = e.forward(torch.cat([ids[:, :21], nxt], 1), e.new_cache(64)).logits[0, -1]
        assert close(again, ref, 1e-5), e.name


def test_static_cache_grows_past_capacity(pair):
    _, lean = pair
    ids = prompt(40, seed=3)
    c = lean.new_cache(16)
    lean.forward(ids[:, :10], c)
    out = lean.forward(ids[:, 10:], c).logits
    ref = lean.forward(ids, lean.new_cache(64)).logits[:, 10:]
    assert c.capacity >= 40 and close(out, ref, 1e-5)


def test_ar_outputs_identical_between_engines(pair):
    from bench.decode.loop import generate
    from groundfloor.clock import Clock
    from groundfloor.sampling import SamplingParams
    from methods.registry import Context, build_method

    outs = []
    for e in pair:
        ctx = Context(e, None, torch.device("cpu"), e.dtype, None)
        res = generate(
            build_method("ar", ctx),
            prompt(12, seed=4)[0].tolist(),
            30,
            SamplingParams(),
            set(),
            Clock(torch.device("cpu")),
        )
        outs.append(res.output_ids)
    assert outs[0] == outs[1] and len(outs[0]) == 30


def test_bfloat16_within_rounding(tiny_target_dir):
    hf, lean = engines(tiny_target_dir, "bfloat16")
    ids = prompt()
    a = hf.forward(ids, hf.new_cache(64)).logits
    b = lean.forward(ids, lean.new_cache(64)).logits
    assert a.dtype == b.dtype == torch.bfloat16
    assert close(b, a, 0.05)  # a few bf16 steps (2^-8) through two layers


@pytest.mark.parametrize("kind", ["qwen2", "mistral"])
def test_other_llama_family_architectures(tmp_path, kind):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(
        kind,
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=kind == "qwen2",
    )
    model = AutoModelForCausalLM.from_config(cfg).eval()
    if kind == "qwen2":  # make the q/k/v biases matter
        for layer in model.model.layers:
            for p in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                torch.nn.init.normal_(p.bias, std=0.5)
    model.save_pretrained(tmp_path)
    hf, lean = engines(tmp_path)
    ids = prompt(19)
    assert close(
        lean.forward(ids, lean.new_cache(32)).logits, hf.forward(ids, hf.new_cache(32)).logits, 1e-4
    )


def test_unsupported_architecture_names_engine_hf(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)).save_pretrained(
        tmp_path
    )
    with pytest.raises(UserError, match="engine=hf"):
        load(str(tmp_path), "cpu", engine="lean", dtype="float32")
    eng, choice = load(str(tmp_path), "cpu", engine="auto", dtype="float32")
    assert eng.name == "hf" and "gpt2" in choice["engine_reason"]


def test_quantized_weights_on_hf_engine_refused(tiny_target_dir):
    with pytest.raises(UserError, match="model.weights='int4' needs engine=lean"):
        load(str(tiny_target_dir), "cpu", engine="hf", weights="int4", dtype="float32")


def test_the_weight_choice_depends_on_the_device():
    """The embedded GGUF runs int4 on a CPU and bfloat16 on CUDA unless asked; int4 asked on
    CUDA is checked against the kernel's packing (576 wide fits innerKTiles 4, not 8)."""
    from types import SimpleNamespace

    from engines.formats import cuda_int4_tiles
    from engines.load import resolve_weights

    gguf = SimpleNamespace(gguf="model.gguf", config=SimpleNamespace(hidden_size=576))
    assert resolve_weights(gguf, "lean", "auto", "float32", "cpu")[0] == "int4"
    w, why = resolve_weights(gguf, "lean", "auto", "bfloat16", "cuda")
    assert w == "bfloat16" and "on a GPU" in why
    assert resolve_weights(gguf, "lean", "int4", "bfloat16", "cuda") == ("int4", "asked for")
    assert cuda_int4_tiles(576) == 4 and cuda_int4_tiles(1536) == 8
    odd = SimpleNamespace(gguf="model.gguf", config=SimpleNamespace(hidden_size=100))
    with pytest.raises(UserError, match="width divisible by 32, this model's is 100"):
        resolve_weights(odd, "lean", "int4", "bfloat16", "cuda")


def test_the_dtype_is_chosen_by_the_instruction_set_and_the_path_never_timed(monkeypatch):
    """model.dtype=auto on a CPU: float32 for the native kernels' GGUF blocks, the stored float
    format, else bfloat16 where the CPU computes it (its flags), float32 where it does not; no
    forward is timed (the dtype changes the numbers, so a clock must not pick it)."""
    from types import SimpleNamespace

    from engines import load as L
    from engines import native, probe

    def no_clock(*a, **k):
        raise AssertionError("model.dtype=auto timed a forward")

    monkeypatch.setattr(probe, "step_costs", no_clock)
    gguf = SimpleNamespace(gguf="model.gguf", config=SimpleNamespace(hidden_size=576))
    hf = SimpleNamespace(gguf=None, config=SimpleNamespace(hidden_size=576))
    monkeypatch.setattr(L, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    lean = L.choose_dtype(gguf, "lean", "auto", "auto", "cpu", "auto")
    if native.kernels()[0] is not None:
        assert lean[0] == "float32" and "activations" in lean[1]["reason"]
    assert L.choose_dtype(hf, "hf", "auto", "auto", "cpu", "auto")[0] == "bfloat16"
    assert L.choose_dtype(hf, "lean", "float32", "auto", "cpu", "auto")[0] == "float32"
    monkeypatch.setattr(L, "cpu_flags", lambda: {"avx2"})
    assert L.choose_dtype(hf, "hf", "auto", "auto", "cpu", "auto")[0] == "float32"
    assert L.choose_dtype(hf, "hf", "auto", "auto", "cuda", "auto")[0] == "bfloat16"


# --- weight formats ---------------------------------------------------------------------------


def int4_case(seed=0, o=64, i=96):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (o, i), generator=g, dtype=torch.uint8)
    scale = torch.rand(o, i // 32, generator=g) * 0.1 + 0.01
    offset = torch.randn(o, i // 32, generator=g) * 0.1
    want = (q.float().view(o, -1, 32) * scale[..., None] + offset[..., None]).view(o, i)
    return q, scale, offset, want, torch.randn(9, i, generator=g)


def test_int4_native_kernel_holds_exact_values_and_is_batch_invariant():
    from engines.formats import Linear

    q, scale, offset, want, x = int4_case()
    lin = Linear.from_int4(q, scale, offset, kernel="native")
    assert torch.equal(lin.dequantized(), want)  # float32 scale · q + offset, as stored
    y = lin(x)
    assert close(y, x @ want.t(), 1e-5)
    # each row is computed alike whatever the batch: a verify forward equals one-token ones
    rows = torch.cat([lin(x[r : r + 1]) for r in range(x.shape[0])])
    assert torch.equal(y, rows)
    assert torch.equal(lin(x[:3]), y[:3]) and torch.equal(lin(x[:8]), y[:8])


def q8a_reference(qw, dw, mw, qx, dx, sx):
    """native_q8a's sum in float64: Σ_b dw·dx·Σ_j qw·qx (+ Σ_b mw·s)."""
    n, m, nb = qw.shape[0], qx.shape[0], dw.shape[1]
    i = torch.einsum("ngj,mgj->mng", qw.double().view(n, nb, 32), qx.double().view(m, nb, 32))
    y = (i * dw.double()[None] * dx.double()[:, None]).sum(-1)
    return y if mw is None else y + (mw.double()[None] * sx.double()[:, None]).sum(-1)


def test_int8_activation_kernel_is_llama_cpps_arithmetic_and_batch_invariant():
    """native_q8a: x quantized per block of 32 (d = amax/127, q = round(x/d), ties to even),
    then Σ_b dw·dx·Σ qw·qx (+ Σ_b mw·d·Σq for q4) on weights repacked at load (q4 scales in
    float16, as GGUF's Q4_1 has them): within float rounding of that sum, each row alike
    whatever the batch, and the repacked tiles give back the weights."""
    from engines.formats import Linear
    from engines.native import kernels

    mod = kernels()[0]
    q, scale, offset, want, x = int4_case()
    x = x * 3
    x[0, 5] = 40.0  # an outlier: its block's scale
    qx, dx, sx, sq = mod.quantize_q8a(x.contiguous())
    blocks = x.view(x.shape[0], -1, 32)
    d = blocks.abs().amax(-1) / 127
    assert torch.equal(dx, d)
    assert torch.equal(qx.view_as(blocks), torch.round(blocks * (1 / d)[..., None]).to(torch.int8))
    assert torch.equal(sq, qx.view_as(blocks).sum(-1).int())
    assert torch.equal(sx, d * sq.float())
    lin = Linear.from_int4(q, scale, offset, kernel="native_q8a")
    s16, o16 = scale.half().float(), offset.half().float()
    assert torch.equal(
        lin.dequantized(),
        (q.float().view(*s16.shape, 32) * s16[..., None] + o16[..., None]).view(q.shape),
    )
    y = lin(x)
    assert close(y.double(), q8a_reference(q, s16, o16, qx, dx, sx), 1e-6)
    assert close(y, x @ want.t(), 0.02)  # the activations' rounding, ~1% here
    rows = torch.cat([lin(x[r : r + 1]) for r in range(x.shape[0])])
    assert torch.equal(y, rows)
    q8 = torch.randint(
        -128, 128, tuple(q.shape), dtype=torch.int8, generator=torch.Generator().manual_seed(1)
    )
    lin8 = Linear.from_q8_0(q8, scale, kernel="native_q8a")  # float32 scales kept as they are
    assert torch.equal(
        lin8.dequantized(), (q8.float().view(*scale.shape, 32) * scale[..., None]).view(q.shape)
    )
    assert close(lin8(x).double(), q8a_reference(q8, scale, None, qx, dx, sx), 1e-6)
    got = mod.unpack(lin8.packed, q.shape[0])
    assert torch.equal(got[0], q8) and torch.equal(got[1], scale)


def test_int4_aten_kernel_rounds_scales_to_bfloat16():
    from engines.formats import Linear

    q, scale, offset, want, x = int4_case(1)
    lin = Linear.from_int4(q, scale, offset, kernel="aten")
    s16 = scale.bfloat16().float()
    z16 = (offset + 8 * scale).bfloat16().float()
    ref = ((q.float().view(64, 3, 32) - 8) * s16[..., None] + z16[..., None]).view(64, 96)
    # the kernel returns bf16: the expected values rounded once to bf16
    assert torch.equal(lin.dequantized(), ref.bfloat16().float())
    assert close(lin(x), x.bfloat16().float() @ ref.t(), 1e-2)


@pytest.mark.parametrize("kernel", ["native", "aten"])
def test_int8_unpacks_to_the_expected_values(kernel):
    from engines.formats import Linear, quantize_int8

    w = torch.randn(48, 64)
    q, s = quantize_int8(w)
    lin = Linear.from_float(w, "int8", kernel=kernel)
    assert torch.equal(lin.qweight, q)
    scale = s if kernel == "native" else s.bfloat16().float()
    assert torch.equal(lin.dequantized(), q.float() * scale[:, None])
    assert close(lin.dequantized(), w, 0.01)


def test_q8_0_blocks_are_kept_exactly():
    from engines.formats import Linear

    g = torch.Generator().manual_seed(2)
    q = torch.randint(-127, 128, (40, 64), generator=g, dtype=torch.int8)
    d = torch.rand(40, 2, generator=g) * 0.01
    lin = Linear.from_q8_0(q, d)
    want = (q.float().view(40, 2, 32) * d[..., None]).view(40, 64)
    assert lin.fmt == "q8_0" and torch.equal(lin.dequantized(), want)
    x = torch.randn(5, 64, generator=g)
    assert close(lin(x), x @ want.t(), 1e-5)


def test_q4_1_blocks_map_onto_int4():
    """A GGUF Q4_1 block w = d·q + m is the int4 group (q − 8)·d + (m + 8d)."""
    from engines import build
    from engines.gguf import Q4_1

    g = torch.Generator().manual_seed(1)
    blk = Q4_1(
        torch.randint(0, 16, (32, 64), generator=g, dtype=torch.uint8),
        torch.rand(32, 2, generator=g) * 0.05,
        torch.randn(32, 2, generator=g) * 0.1,
    )
    native = build.fused([blk], "int4", "cpu", "native")
    assert torch.equal(native.dequantized(), blk.dequantize())  # exactly the shipped values
    aten = build.fused([blk], "int4", "cpu", "aten")
    assert close(aten.dequantized(), blk.dequantize(), 2**-7)  # scales rounded to bf16


def test_gguf_block_decoding():
    """Q4_1 / Q8_0 bytes as llama.cpp lays them out: low nibbles first, then high."""
    import numpy as np

    from engines.gguf import _q4_1, _q8_0

    d, m = np.float16(0.5), np.float16(-1.0)
    q = np.arange(32) % 16
    nib = (q[:16] | (q[16:] << 4)).astype(np.uint8)
    raw = np.concatenate([np.frombuffer(d.tobytes() + m.tobytes(), np.uint8), nib])[None]
    blk = _q4_1(raw)
    assert torch.equal(blk.q[0], torch.tensor(q, dtype=torch.uint8))
    assert torch.allclose(blk.dequantize()[0], torch.tensor(q * 0.5 - 1.0, dtype=torch.float32))
    q8 = np.arange(-16, 16, dtype=np.int8)
    raw8 = np.concatenate([np.frombuffer(np.float16(0.25).tobytes(), np.uint8), q8.view(np.uint8)])[
        None
    ]
    assert torch.allclose(_q8_0(raw8).dequantize()[0], torch.tensor(q8 * 0.25, dtype=torch.float32))


@pytest.mark.parametrize("kernel", ["native", "aten", "native_q8a"])
@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_quantized_lean_matches_a_float_forward_over_its_own_values(
    tiny_target_dir, weights, kernel
):
    """The quantized engine computes what a float forward over the dequantized weights does,
    within the bf16 activations its kernels take."""
    import copy

    from engines.formats import Linear

    q, _ = load(
        str(tiny_target_dir), "cpu", engine="lean", dtype="float32", weights=weights, kernel=kernel
    )
    assert {m.kernel for m in q.model.modules() if isinstance(m, Linear)} == {kernel}
    ref = copy.deepcopy(q)
    for mod in ref.model.modules():  # swap every projection for float32 over its own values
        for name, child in list(mod.named_children()):
            if isinstance(child, Linear):
                setattr(
                    mod, name, Linear.from_float(child.dequantized(), "float32", bias=child.bias)
                )
    ids = prompt(21)
    a = q.forward(ids, q.new_cache(32)).logits
    b = ref.forward(ids, ref.new_cache(32)).logits
    # native: float32 throughout; aten: bf16 activations; native_q8a: int8 activations
    assert close(a, b, {"native": 1e-5, "aten": 0.03, "native_q8a": 0.05}[kernel])


def test_every_native_kernel_value_is_a_family_of_the_module():
    """engines.native.FAMILIES is the one table from model.kernel to the module's kernel
    families: each of its rows names a family the module has, each family has a row, and each
    row is a model.kernel value."""
    from engines import native
    from engines.load import KERNELS

    mod = native.kernels()[0]
    assert set(native.FAMILIES.values()) == set(mod.Family.__members__)
    assert set(native.FAMILIES) <= set(KERNELS)
    assert native.family("native_q8a") == mod.Family.q8a


def test_a_build_is_named_by_every_file_of_the_kernel_folder(tmp_path, monkeypatch):
    """An edited header (not only the translation unit) names another build, so it is built
    afresh instead of an older one imported."""
    import shutil

    from engines import native

    folder = tmp_path / "kernels"
    shutil.copytree(native.FOLDER, folder)
    monkeypatch.setattr(native, "FOLDER", folder)
    before = native.digest("avx2", native.FLAGS["avx2"])
    assert native.digest("portable", native.FLAGS["portable"]) != before
    header = folder / "contract.h"
    header.write_text(header.read_text() + "\n")
    assert native.digest("avx2", native.FLAGS["avx2"]) != before


@pytest.mark.slow
def test_every_build_gives_the_same_bits():
    """Each build (AVX-512, AVX2, portable C++: every one this CPU runs) does the same
    operations in the same order: every product (in every kernel family; q8a on its repacked
    tiles, with a tile remainder of output rows), norm and rotary equals the portable build's
    exactly, for any batch (1-33 rows), so a gate recorded on one CPU holds on another."""
    from engines import native

    builds = {k: native.build(k) for k in native.supported()}
    ref = builds.pop("portable")
    assert ref.isa() == "portable"
    g = torch.Generator().manual_seed(5)
    for n, k in ((12, 64), (7, 96), (37, 160)):
        q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
        blocks = q.view(n, k // 32, 32)
        nib = (blocks[..., :16] | (blocks[..., 16:] << 4)).reshape(n, k // 2).contiguous()
        scale = torch.rand(n, k // 32, generator=g) * 0.1 + 0.01
        offset = torch.randn(n, k // 32, generator=g) * 0.1
        q8 = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
        p4, p8 = ref.repack_q4(nib, scale, offset), ref.repack_q8(q8, scale)
        for m in (1, 2, 3, 4, 5, 8, 9, 16, 17, 33):
            x = torch.randn(m, k, generator=g)
            want = {
                fam: (
                    ref.q4_linear(x, nib, scale, offset, getattr(ref.Family, fam)),
                    ref.q8_linear(x, q8, scale, getattr(ref.Family, fam)),
                )
                for fam in (native.FAMILIES[name] for name in native.BLOCKS)
            }
            assert torch.equal(ref.packed_linear(x, p4, n), want["q8a"][0])
            for kind, mod in builds.items():
                for fam, (a, b) in want.items():
                    f = getattr(mod.Family, fam)
                    assert torch.equal(mod.q4_linear(x, nib, scale, offset, f), a), (
                        kind,
                        fam,
                        n,
                        k,
                        m,
                    )
                    assert torch.equal(mod.q8_linear(x, q8, scale, f), b), (kind, fam, n, k, m)
                assert torch.equal(mod.packed_linear(x, p4, n), want["q8a"][0])
                assert torch.equal(mod.packed_linear(x, p8, n), want["q8a"][1])
                assert torch.equal(mod.repack_q4(nib, scale, offset), p4)
    x, w = torch.randn(5, 576, generator=g), torch.randn(576, generator=g)
    cos, sin = torch.randn(5, 64, generator=g), torch.randn(5, 64, generator=g)
    xr = x[:, :192].contiguous()
    ref.rope_(xr, 3, 64, cos, sin)
    heads = x[:, :192].view(5, 3, 64)  # x·cos + roll(x, hd/2)·sin, each a product and one sum
    rolled = torch.cat([heads[..., 32:], heads[..., :32]], -1)
    assert torch.equal(xr.view(5, 3, 64), heads * cos[:, None] + rolled * sin[:, None])
    for kind, mod in builds.items():
        assert torch.equal(mod.rms_norm(x, w, 1e-5), ref.rms_norm(x, w, 1e-5)), kind
        xa = x[:, :192].contiguous()
        mod.rope_(xa, 3, 64, cos, sin)
        assert torch.equal(xa, xr), kind


def test_attention_is_exact_on_every_build_alone_or_among_rows():
    """The decode attention (several heads of a row side by side over their shared KV head,
    eight keys' scores finished at once): every build gives the portable build's bits, for
    head widths 32/64/128, 1-4 heads a KV head, causal or masked; a row computed alone (its
    mask row, the cache as it is) gets the bits it gets among the others; and the result is
    softmax attention to float32 rounding."""
    from engines import native

    builds = {k: native.build(k) for k in native.supported()}
    ref = builds.pop("portable")
    g = torch.Generator().manual_seed(11)
    for trial, (hd, nkv, group, n) in enumerate(
        [(64, 3, 3, 1), (64, 3, 3, 8), (64, 2, 4, 5), (64, 1, 2, 3), (128, 2, 3, 4), (32, 2, 1, 6)]
    ):
        nh, start = nkv * group, int(torch.randint(1, 90, (1,), generator=g))
        kc = torch.randn(nkv, start + n + 3, hd, generator=g)
        vc = torch.randn(nkv, start + n + 3, hd, generator=g)
        qkv = torch.randn(n, (nh + 2 * nkv) * hd, generator=g) * 2
        causal = torch.ones(n, start + n).tril(start).bool()
        mask = None
        if trial % 2:  # a tree's mask: some of the keys up to a row's own slot, the first one
            mask = (torch.rand(n, start + n, generator=g) < 0.6) & causal
            mask[:, 0] = True
        want = ref.attention(qkv, kc, vc, start, mask, nh, nkv, hd)
        for kind, mod in builds.items():
            assert torch.equal(mod.attention(qkv, kc, vc, start, mask, nh, nkv, hd), want), kind
        vis = mask if mask is not None else causal
        q = qkv[:, : nh * hd].view(n, nh, hd).double()
        k = kc[:, : start + n].double().repeat_interleave(group, 0)
        v = vc[:, : start + n].double().repeat_interleave(group, 0)
        sc = torch.einsum("nhd,hjd->nhj", q, k) / hd**0.5
        sc = sc.masked_fill(~vis[:, None], float("-inf")).softmax(-1)
        exact = torch.einsum("nhj,hjd->nhd", sc, v).reshape(n, nh * hd)
        assert torch.allclose(want.double(), exact, atol=1e-5, rtol=1e-5), trial
        for mod in (ref, *builds.values()):
            for r in range(n):
                row = mod.attention(
                    qkv[r : r + 1].contiguous(), kc, vc, start + r, vis[r : r + 1, : start + r + 1],
                    nh, nkv, hd,
                )  # fmt: skip
                assert torch.equal(row[0], want[r]), (trial, r)


def test_a_bfloat16_cache_is_read_as_its_float32_values_on_every_build():
    """model.kv_dtype=bfloat16: attention widens each cached key and value exactly, so a
    bfloat16 cache gives the bits of a float32 cache holding the same values, on every build,
    for a row alone or among rows, causal or under a tree's mask."""
    from engines import native

    builds = {k: native.build(k) for k in native.supported()}
    g = torch.Generator().manual_seed(12)
    for trial, (nkv, group, n) in enumerate([(3, 3, 1), (3, 3, 6), (2, 2, 4)]):
        nh, hd, start = nkv * group, 64, int(torch.randint(1, 70, (1,), generator=g))
        kb = torch.randn(nkv, start + n + 2, 64, generator=g).bfloat16()
        vb = torch.randn(nkv, start + n + 2, 64, generator=g).bfloat16()
        qkv = torch.randn(n, (nh + 2 * nkv) * hd, generator=g)
        causal = torch.ones(n, start + n).tril(start).bool()
        mask = None
        if trial % 2:
            mask = (torch.rand(n, start + n, generator=g) < 0.6) & causal
            mask[:, 0] = True
        vis = mask if mask is not None else causal
        want = builds["portable"].attention(qkv, kb.float(), vb.float(), start, mask, nh, nkv, hd)
        for kind, mod in builds.items():
            got = mod.attention(qkv, kb, vb, start, mask, nh, nkv, hd)
            assert torch.equal(got, want), (kind, trial)
            for r in range(n):
                row = mod.attention(
                    qkv[r : r + 1].contiguous(), kb, vb, start + r, vis[r : r + 1, : start + r + 1],
                    nh, nkv, hd,
                )  # fmt: skip
                assert torch.equal(row[0], want[r]), (kind, trial, r)
        with pytest.raises(RuntimeError, match="all of one dtype"):
            builds["portable"].attention(qkv, kb, vb.float(), start, mask, nh, nkv, hd)


@pytest.mark.parametrize("kernel", ["native_q8a", "aten"])
def test_a_bfloat16_cache_stays_within_its_rounding(tiny_target_dir, kernel):
    """The engine keeps its cache in the dtype asked for (model.kv_dtype), records it in its
    choice, and a bfloat16 cache moves the logits by about its rounding, no more; the native
    and the op-by-op (aten) paths both read it."""
    kw = dict(engine="lean", weights="int4", dtype="float32", kernel=kernel)
    f32, c32 = load(str(tiny_target_dir), "cpu", **kw)
    b16, c16 = load(str(tiny_target_dir), "cpu", kv_dtype="bfloat16", **kw)
    assert c32["kv_dtype"] == "float32" and c16["kv_dtype"] == "bfloat16"
    ids = prompt(30)
    outs = []
    for eng in (f32, b16):
        cache = eng.new_cache(8)  # grows past its capacity in its own dtype
        first = eng.forward(ids, cache).logits
        step = eng.forward(torch.tensor([[5]]), cache).logits
        outs.append((first, step, cache))
    assert outs[0][2].k.dtype == torch.float32 and outs[1][2].k.dtype == torch.bfloat16
    assert outs[1][2].nbytes() * 2 == outs[0][2].nbytes()
    # the first layer's keys are the same values, rounded (later layers read rounded caches)
    assert torch.equal(outs[1][2].k[0, ..., :31, :], outs[0][2].k[0, ..., :31, :].bfloat16())
    for a, b in zip(outs[0][:2], outs[1][:2]):
        assert close(b, a, 0.03)
        # (aten's int4 product rounds its output to bfloat16: there the rounding may change
        # nothing; the native kernels' float32 keys and values are rounded)
        assert kernel == "aten" or not torch.equal(a, b)


def test_the_kv_dtype_is_checked_in_one_line(tiny_target_dir):
    with pytest.raises(UserError, match=r"model.kv_dtype='int8' is not valid; choose one of: auto"):
        load(str(tiny_target_dir), "cpu", engine="lean", kv_dtype="int8")
    with pytest.raises(UserError, match="model.kv_dtype=bfloat16 needs engine=lean"):
        load(str(tiny_target_dir), "cpu", engine="hf", kv_dtype="bfloat16")


@pytest.mark.parametrize(
    "weights, kernel",
    [
        ("int4", "native"),
        ("int8", "native"),
        ("int4", "native_q8a"),
        ("int8", "native_q8a"),
        ("bfloat16", "native_bf16"),
    ],
)
def test_one_call_per_layer_equals_the_layer_op_by_op(
    tiny_target_dir, weights, kernel, monkeypatch
):
    """engines.native's layer_ runs Block.forward_native's ops in its order: the logits and the
    cache equal the op-by-op layer's bit for bit, for a prefill, decoding steps and a tree.
    float32 pinned: dtype=auto times float32 against bfloat16 where the CPU has both, and a busy
    machine can flip that choice between the two loads."""
    from engines.lean import Block

    def run():
        eng, _ = load(
            str(tiny_target_dir),
            "cpu",
            engine="lean",
            weights=weights,
            dtype="float32",
            kernel=kernel,
        )
        calls.append(all(b.native_weights() for b in eng.model.layers))  # one call per layer
        ids = torch.randint(3, 100, (1, 12), generator=torch.Generator().manual_seed(0))
        cache = eng.new_cache(32)
        outs = [eng.forward(ids, cache).logits]
        for t in (5, 9, 11):
            outs.append(eng.forward(torch.tensor([[t]]), cache).logits)
        tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
        mask = torch.cat([torch.ones(3, cache.length, dtype=torch.bool), tree], 1)[None]
        pos = torch.tensor([[cache.length, cache.length + 1, cache.length + 1]])
        outs.append(eng.forward(torch.tensor([[4, 7, 8]]), cache, positions=pos, mask=mask).logits)
        return outs, cache.k[:, :, :, : cache.length].clone()

    calls = []
    fused, k_fused = run()
    monkeypatch.setattr(Block, "native_weights", lambda self: [])
    plain, k_plain = run()
    assert calls == [True, False]
    assert all(torch.equal(a, b) for a, b in zip(fused, plain))
    assert torch.equal(k_fused, k_plain)


def random_tree(g, q: int):
    """A random tree of q nodes in topological order (parent before child): (parents, depths,
    ancestor mask (q, q), True where node i sees node j, itself included)."""
    parent = [-1] + [int(torch.randint(-1, i, (1,), generator=g)) for i in range(1, q)]
    depth, anc = [], torch.zeros(q, q, dtype=torch.bool)
    for i in range(q):
        depth.append(0 if parent[i] < 0 else depth[parent[i]] + 1)
        j = i
        while j >= 0:
            anc[i, j], j = True, parent[j]
    return parent, depth, anc


def tree_rows_alone(eng, g, trials: int):
    """For random prefixes and random trees of 2-64 nodes: each node's logits from one forward
    over the whole tree, and from a forward of its path alone (ancestors then itself, causal);
    → (tree logits, path logits) per trial."""
    out = []
    for _ in range(trials):
        P, q = (
            int(torch.randint(3, 40, (1,), generator=g)),
            int(torch.randint(2, 65, (1,), generator=g)),
        )
        prefix = torch.randint(3, eng.vocab_size, (1, P), generator=g)
        parent, depth, anc = random_tree(g, q)
        ids = torch.randint(3, eng.vocab_size, (1, q), generator=g)
        cache = eng.new_cache(P + 80)
        eng.forward(prefix, cache)
        mask = torch.cat([torch.ones(q, P, dtype=torch.bool), anc], 1)[None]
        pos = torch.tensor([[P + d for d in depth]])
        tree = eng.forward(ids, cache, positions=pos, mask=mask).logits[0]
        alone = []
        for i in range(q):
            path = anc[i].nonzero().flatten()  # ancestors in slot order, which is depth order
            cache.crop(P)
            alone.append(eng.forward(ids[:, path], cache).logits[0, -1])
        out.append((tree, torch.stack(alone)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "weights, kernel", [("int4", "native"), ("int4", "native_q8a"), ("bfloat16", "native_bf16")]
)
def test_a_rows_logits_are_the_same_alone_or_in_any_tree_on_every_build(
    tiny_target_dir, weights, kernel, monkeypatch
):
    """Batch invariance of the whole forward: a node of a random tree (2-64 nodes, any shape,
    after a random prefix) gets the logits bit for bit that a forward of its path alone gives:
    the products, the attention over its visible keys in position order (not over the cache
    slots the masked nodes hold) and the row ops depend on nothing but the row. And every
    build (AVX-512, AVX2, portable) gives the same bits, so a greedy verify equals one-token
    decoding on any machine, without near-tie exceptions."""
    from engines import native

    results = {}
    for kind in native.supported():
        monkeypatch.setattr(native, "_STATE", {"mod": native.build(kind), "why": f"built {kind}"})
        eng, _ = load(
            str(tiny_target_dir),
            "cpu",
            engine="lean",
            weights=weights,
            dtype="float32",
            kernel=kernel,
        )
        results[kind] = tree_rows_alone(eng, torch.Generator().manual_seed(3), trials=4)
        for tree, alone in results[kind]:
            assert torch.equal(tree, alone), kind
    first = results.pop("portable")
    for kind, res in results.items():
        assert all(torch.equal(a[0], b[0]) for a, b in zip(res, first)), kind


def test_kernel_check_times_every_product_of_each_family(tiny_target_dir, capsys):
    """bench.tools.kernel_check: each of a layer's four products and the output layer, per family
    and row count, cold and warm, each a positive time with its weights' bytes."""
    from bench.tools import kernel_check

    rows = kernel_check.main(
        ["--model", str(tiny_target_dir), "--rows", "1", "3", "--repeats", "1"]
    )
    kinds = {(r["kernel"], r["product"], r["rows"]) for r in rows}
    assert len(kinds) == len(rows) == 2 * 5 * 2
    assert all(r["cold_ms"] > 0 and r["warm_ms"] > 0 and r["bytes"] > 0 for r in rows)
    assert "native_q8a: ms per call" in capsys.readouterr().out


@pytest.mark.parametrize(
    "kernel, kv", [("native", "auto"), ("native_q8a", "auto"), ("aten", "auto"),
                   ("native_q8a", "bfloat16"), ("native_bf16", "auto")]
)  # fmt: skip
def test_several_sequences_in_one_forward_equal_each_alone(tiny_target_dir, kernel, kv):
    """engine.forward_seqs: sequences of different lengths, each with its own cache (its own
    length and capacity) and positions, one of them verifying a tree, in one forward (on the
    native kernels one call of the model's Stack: every product over all their rows) give each
    sequence the logits, taps and cache rows of its own forward, bit for bit; `aten` runs each
    sequence's own forward."""
    eng, _ = load(
        str(tiny_target_dir), "cpu", engine="lean", dtype="float32", kernel=kernel, kv_dtype=kv,
        weights="bfloat16" if kernel == "native_bf16" else "int4",
    )  # fmt: skip
    assert (eng.model.native_stack() is not None) == (kernel != "aten")  # one call, or each alone
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 100, (n,), generator=g) for n in (5, 20, 8)]
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    alone, caches = [], []
    for b, p in enumerate(prompts):  # each sequence alone: its prompt, then one round
        cache = eng.new_cache(32)
        outs = [eng.forward(p[None], cache, hidden=(1, -1))]
        if b == 1:  # a tree of three nodes after the prompt
            mask = torch.cat([torch.ones(3, 20, dtype=torch.bool), tree], 1)[None]
            pos = torch.tensor([[20, 21, 21]])
            outs.append(eng.forward(torch.tensor([[4, 7, 8]]), cache, pos, mask, hidden=(1, -1)))
        else:
            outs.append(eng.forward(torch.tensor([[9]]), cache, hidden=(1, -1)))
        alone.append(outs)
        caches.append(cache)
    mine = [eng.new_cache(c) for c in (8, 16, 32)]  # each its own capacity (the 16 grows)
    first = eng.forward_seqs(prompts, mine, hidden=(1, -1))
    ids = [torch.tensor([9]), torch.tensor([4, 7, 8]), torch.tensor([9])]
    pos = [None, torch.tensor([20, 21, 21]), None]
    masks = [None, torch.cat([torch.ones(3, 20, dtype=torch.bool), tree], 1), None]
    second = eng.forward_seqs(ids, mine, pos, masks, hidden=(1, -1))
    for b in range(3):
        for got, want in zip((first[b], second[b]), alone[b]):
            assert torch.equal(got.logits, want.logits), (kernel, b)
            assert all(torch.equal(got.hidden[h], want.hidden[h]) for h in (1, -1))
        n = caches[b].length
        assert mine[b].length == n
        assert torch.equal(mine[b].k[..., :n, :], caches[b].k[..., :n, :]), (kernel, b)
        assert torch.equal(mine[b].v[..., :n, :], caches[b].v[..., :n, :])
    last = eng.forward_seqs(ids, mine, logits_to_keep=[1, 2, 0])
    assert [o.logits.shape[1] for o in last] == [1, 2, 1]


def test_llama_cpp_is_built_for_the_cpus_instruction_sets_without_amx():
    """make install-llamacpp's CMAKE_ARGS: GGML_NATIVE off, each instruction set by the CPU's
    flags (an AVX2-only Zen 3 gets no AVX-512; an AMX Xeon gets AVX-512 with VNNI and BF16),
    the AMX backend off on every kind."""
    from engines.cpu import llamacpp_cmake_args as cmake_args

    zen3 = cmake_args(frozenset({"avx", "avx2", "fma", "f16c"}))
    assert "-DGGML_NATIVE=OFF" in zen3 and "-DGGML_AVX2=ON" in zen3
    assert "-DGGML_AVX512=OFF" in zen3 and "-DGGML_AVX512_BF16=OFF" in zen3
    xeon = {"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl"}
    xeon |= {"avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"}
    amx = cmake_args(frozenset(xeon))
    assert "-DGGML_AVX512=ON" in amx and "-DGGML_AVX512_VNNI=ON" in amx
    assert "-DGGML_AVX512_BF16=ON" in amx and "-DGGML_AVX512_VBMI=OFF" in amx
    assert all(f"-DGGML_AMX_{x}=OFF" in amx for x in ("TILE", "INT8", "BF16"))


def test_a_llama_cpp_worker_that_dies_is_one_line_with_its_own_error(tmp_path):
    """The worker run by an interpreter without llama_cpp dies importing it: the peer says so in
    one line, with the worker's exit status and its last error line."""
    import sys

    from bench.tools.llamacpp_peer import Peer

    with pytest.raises(RuntimeError) as e:
        Peer(tmp_path / "model.gguf", python=sys.executable)
    msg = str(e.value)
    assert "\n" not in msg and "died, exit status 1" in msg
    assert "No module named 'llama_cpp'" in msg
