"""EAGLE-2 / EAGLE-3: head layouts (ours and the authors' published ones), training-time-test
masks against inference drafting, greedy exactness of the dynamic tree, sampling, training."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import compose, tiny_llama
from forced import run_forced
from helpers import (
    TINY_DISTILL,
    eagle_method,
    make_ctx,
    prompts,
    random_head,
    run,
    save_head,
    tiny_run,
)

from bench.run.runner import execute
from drafters import eagle as eagle_io
from drafters import weights
from drafters.headcache import HeadCache
from engines import native
from engines.base import tree_mask
from engines.load import wrap
from methods import budget
from methods.registry import build_method
from train.eagle_spec import EagleSpec, unroll_mask

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=["hf", "lean"])
def target(request):
    return wrap(tiny_llama(0, layers=4), request.param)


def write_published_config(path, hidden, inter, **fields):
    """config.json as the EAGLE authors publish it: plain LlamaConfig fields, rope_theta."""
    (path / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": hidden,
                "intermediate_size": inter,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "num_hidden_layers": 1,
                "rms_norm_eps": 1e-6,
                "rope_theta": 10000.0,
                "vocab_size": 128,
                "max_position_embeddings": 1024,
                "hidden_act": "silu",
                **fields,
            }
        )
    )


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_our_layout_round_trips(target, kind, tmp_path):
    head = random_head(target, kind, 1)
    eagle_io.save(head, tmp_path, "tiny", dtype=torch.float32)
    loaded, cfg = eagle_io.load(tmp_path, target)
    assert loaded.kind == kind and loaded.target_layers == head.target_layers
    feat, ids = torch.randn(1, 5, 32), torch.randint(0, 128, (1, 5))
    pos = torch.arange(5)[None]
    mask = unroll_mask(5, 1, torch.float32, "cpu")
    a, b = head(feat, ids, pos, mask)[0], loaded(feat, ids, pos, mask)[0]
    assert torch.allclose(head.logits(a), loaded.logits(b), atol=1e-5)
    if kind == "eagle3":
        assert torch.equal(loaded.d2t, head.d2t)
        assert cfg["draft_vocab_size"] == 64 and cfg["architectures"] == [eagle_io.EAGLE3_ARCH]


def test_published_eagle1_checkpoint_loads(target, tmp_path):
    """The authors' EAGLE-1/2 layout: pytorch_model.bin, keys fc.*, layers.0.* (no input norm),
    an embed_tokens copy, and a plain LlamaConfig with rope_theta."""
    H, I = 32, 64
    hd = 8
    sd = {
        "fc.weight": torch.randn(H, 2 * H),
        "fc.bias": torch.randn(H),
        "embed_tokens.weight": torch.randn(128, H),
        "layers.0.self_attn.q_proj.weight": torch.randn(4 * hd, H),
        "layers.0.self_attn.k_proj.weight": torch.randn(2 * hd, H),
        "layers.0.self_attn.v_proj.weight": torch.randn(2 * hd, H),
        "layers.0.self_attn.o_proj.weight": torch.randn(H, 4 * hd),
        "layers.0.mlp.gate_proj.weight": torch.randn(I, H),
        "layers.0.mlp.up_proj.weight": torch.randn(I, H),
        "layers.0.mlp.down_proj.weight": torch.randn(H, I),
        "layers.0.post_attention_layernorm.weight": torch.randn(H),
    }
    torch.save(sd, tmp_path / "pytorch_model.bin")
    write_published_config(tmp_path, H, I, architectures=["LlamaForCausalLM"], bias=True)
    head, _ = eagle_io.load(tmp_path, target)
    assert head.kind == "eagle" and head.target_layers == [-1]
    assert torch.equal(head.layers[0].mlp.down_proj.weight, sd["layers.0.mlp.down_proj.weight"])
    assert head.embed.data_ptr() == target.embed_weight.data_ptr()
    m = eagle_method(target, "eagle", tmp_path)
    base = build_method("ar", make_ctx(target))
    for p in prompts(2, seed=3):
        assert run(m, p, n=20).output_ids == run(base, p, n=20).output_ids


def test_published_eagle3_checkpoint_loads(target, tmp_path):
    """The authors' EAGLE-3 layout: midlayer.*, fc (3H → H), norm, lm_head over a reduced
    vocabulary, d2t as offsets and t2d as a boolean mask."""
    H, I, hd, Vd = 32, 64, 8, 40
    keep = torch.randperm(128)[:Vd].sort().values
    sd = {
        "fc.weight": torch.randn(H, 3 * H),
        "norm.weight": torch.ones(H),
        "lm_head.weight": torch.randn(Vd, H),
        "d2t": keep - torch.arange(Vd),
        "t2d": torch.zeros(128, dtype=torch.bool).index_fill_(0, keep, True),
        "midlayer.hidden_norm.weight": torch.ones(H),
        "midlayer.input_layernorm.weight": torch.ones(H),
        "midlayer.post_attention_layernorm.weight": torch.ones(H),
        "midlayer.self_attn.q_proj.weight": torch.randn(4 * hd, 2 * H),
        "midlayer.self_attn.k_proj.weight": torch.randn(2 * hd, 2 * H),
        "midlayer.self_attn.v_proj.weight": torch.randn(2 * hd, 2 * H),
        "midlayer.self_attn.o_proj.weight": torch.randn(H, 4 * hd),
        "midlayer.mlp.gate_proj.weight": torch.randn(I, H),
        "midlayer.mlp.up_proj.weight": torch.randn(I, H),
        "midlayer.mlp.down_proj.weight": torch.randn(H, I),
    }
    from safetensors.torch import save_file

    save_file(sd, str(tmp_path / "model.safetensors"))
    write_published_config(
        tmp_path, H, I, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=Vd
    )
    head, _ = eagle_io.load(tmp_path, target)
    assert head.kind == "eagle3" and torch.equal(head.d2t, keep)
    assert head.target_layers == [2, 2, 1]  # [2, N // 2, N - 3] for the 4-layer target
    assert torch.equal(head.to_target(torch.tensor([0, Vd - 1])), keep[[0, -1]])
    m = eagle_method(target, "eagle3", tmp_path)
    base = build_method("ar", make_ctx(target))
    for p in prompts(2, seed=5):
        assert run(m, p, n=20).output_ids == run(base, p, n=20).output_ids


def test_wrong_kind_is_one_clear_error(target, tmp_path):
    from groundfloor.errors import UserError

    save_head(target, "eagle", tmp_path)
    with pytest.raises(UserError, match="holds an eagle head; use method=eagle"):
        eagle_method(target, "eagle3", tmp_path)
    with pytest.raises(UserError, match="total_tokens='many'"):
        eagle_method(target, "eagle", tmp_path, total_tokens="many")


def test_unrolled_training_matches_inference_drafting(target):
    """Step j of the training-time test at position s equals drafting j tokens deep from a
    cache of the true features up to s − j + 1 (the mask of `unroll_mask`)."""
    head = random_head(target, "eagle3", 2)
    L, steps = 9, 3
    feat = torch.randn(1, L, 32)
    ids = torch.randint(0, 128, (1, L))
    pos = torch.arange(L)[None]
    outs, ks, vs, inp = [], [], [], feat
    with torch.no_grad():
        for j in range(1, steps + 1):
            pk = torch.cat(ks, -2) if ks else None
            pv = torch.cat(vs, -2) if vs else None
            o, k, v = head(inp, ids, pos, unroll_mask(L, j, torch.float32, "cpu"), pk, pv)
            outs.append(o)
            ks.append(k)
            vs.append(v)
            inp = torch.cat([inp[:, :1], o[:, :-1]], 1)
        s = 7
        for j in (2, 3):
            c = s - j + 2  # true positions 0..c-1 in the cache
            cache = HeadCache()
            o, k, v = head(
                feat[:, :c], ids[:, :c], pos[:, :c], unroll_mask(c, 1, torch.float32, "cpu")
            )
            cache.append(k, v)
            f = o[:, -1:]
            for d in range(1, j):
                p = c - 1 + d
                mask = torch.zeros(1, 1, 1, len(cache) + 1)
                o, k, v = head(f, ids[:, p : p + 1], pos[:, p : p + 1], mask, cache.k, cache.v)
                cache.append(k, v)
                f = o
            assert torch.allclose(f[0, 0], outs[j - 1][0, s], atol=1e-5)


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
@pytest.mark.parametrize(
    "knobs",
    [
        {"k": 4, "top_k": 3, "total_tokens": 10},
        {"k": 1, "top_k": 1, "total_tokens": 1},
        {"k": 4, "top_k": 1, "total_tokens": 3},
        {"k": 6, "top_k": 4, "total_tokens": "auto"},
    ],
)
def test_dynamic_tree_reproduces_ar(target, tmp_path, kind, knobs, monkeypatch):
    # total_tokens=auto reads the engine's timed cost curve; a fixed curve keeps the tree (and so
    # the forced rounds' depths) the same on a busy machine as on a quiet one
    curve = {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3, 16: 2.5, 32: 5.0, 64: 10.0}
    monkeypatch.setattr(budget, "provisional", lambda engine: dict(curve))
    d = save_head(target, kind, tmp_path / "head", seed=3)
    m = eagle_method(target, kind, d, **knobs)
    ar = build_method("ar", make_ctx(target))
    pool = m.top_k + m.top_k**2 * (m.depth - 1)  # nodes drafted before the best are kept
    for p in prompts(4, seed=11):
        base, res = run(ar, p), run(m, p)
        assert res.output_ids == base.output_ids
        assert len(res.drafted_per_pos) <= m.depth
        assert res.drafted_tokens == min(m.total_tokens, pool) * (len(res.accept_lengths) - 1)
    # a random head accepts almost nothing: force right nodes at 60% so the head's after-accept
    # state (features of deep accepted paths) and the accept rule run, checked round by round
    for i, p in enumerate(prompts(2, seed=12)):
        run_forced(eagle_method(target, kind, d, **knobs), ar, p, run, seed=i)
    if knobs["total_tokens"] == "auto":
        n = budget.choose(curve, m.policy.ratio)
        cost = m.info["policy"]["limits"]["verify_cost_ms"]
        assert cost == {k: round(c * 1e3, 2) for k, c in curve.items()}
        assert m.total_tokens == max(n - 1, 1) and n > 2


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_the_native_head_step_is_the_torch_step(target, kind):
    """With its layer int8 on the native kernels a head drafts with the layer as one native call
    (drafters.eagle_native): the torch step's outputs and cache entries up to float rounding,
    causal and under a tree mask, its q/k/v and gate/up views of one fused copy (held once)."""
    if native.kernels()[0] is None:
        pytest.skip(native.kernels()[1])
    head = random_head(target, kind, 2)
    weights.quantize(head)
    held = head.own_bytes()
    assert head.use_native() and head.own_bytes() == held
    feat, ids = torch.randn(6, 32), torch.randint(0, 128, (6,))
    runs = []
    for step in (head.native, None):
        head.native = step
        cache = HeadCache()
        a = head.step(feat[:4], ids[:4], torch.arange(4), None, cache)  # causal catch-up
        two = tree_mask(torch.eye(2, dtype=torch.bool), len(cache))[0]  # two siblings at 4
        b = head.step(a[-1:].expand(2, -1), ids[4:6], torch.full((2,), 4), two, cache)
        child = tree_mask(torch.tensor([[True, False, True]]), len(cache) - 2)[0]  # of the first
        c = head.step(b[:1], ids[5:6], torch.tensor([5]), child, cache)
        runs.append([a, b, c, cache.k.clone(), cache.v.clone()])
    for x, y in zip(*runs):
        assert x.shape == y.shape and torch.allclose(x, y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_a_step_keeping_its_last_rows_gives_them_the_same_bits(target, kind):
    """keep=1 (a catch-up reads only its last output): the native step still caches every row's
    keys and values, and the rows it keeps are the full step's bit for bit, causal and under a
    tree mask."""
    if native.kernels()[0] is None:
        pytest.skip(native.kernels()[1])
    head = random_head(target, kind, 2)
    weights.quantize(head)
    assert head.use_native()
    feat, ids = torch.randn(7, 32), torch.randint(0, 128, (7,))
    got = []
    for keep in (0, 1):
        cache = HeadCache()
        head.step(feat[:2], ids[:2], torch.arange(2), None, cache)
        a = head.step(feat[2:5], ids[2:5], torch.arange(2, 5), None, cache, keep=keep)
        two = tree_mask(torch.eye(2, dtype=torch.bool), len(cache))[0]  # two siblings at 5
        b = head.step(feat[5:7], ids[5:7], torch.full((2,), 5), two, cache, keep=keep)
        got.append([a[-1:], b[-1:], cache.k.clone(), cache.v.clone()])
    for x, y in zip(*got):
        assert torch.equal(x, y)


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_an_int8_head_on_its_native_step_reproduces_ar(target, tmp_path, kind):
    if native.kernels()[0] is None:
        pytest.skip(native.kernels()[1])
    d = save_head(target, kind, tmp_path / "head", seed=5)
    m = eagle_method(target, kind, d, drafter_weights="int8", k=4, top_k=3, total_tokens=8)
    assert m.info["drafter_weights"] == "int8" and m.info["head_step"] == "native"
    ar = build_method("ar", make_ctx(target))
    for p in prompts(3, seed=13):
        assert run(m, p).output_ids == run(ar, p).output_ids
    for i, p in enumerate(prompts(2, seed=14)):
        run_forced(eagle_method(target, kind, d, drafter_weights="int8", k=4), ar, p, run, seed=i)


def test_budget_choice():
    assert budget.choose({1: 1.0, 2: 1.1, 4: 1.2, 8: 1.6, 16: 3.0}, 1.5) == 4
    assert budget.choose({1: 1.0, 8: 1.0, 64: 1.05}, 1.5) == 64


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_check_distribution_passes(kind, tiny_target_dir, tmp_path):
    from groundfloor.models import load_model

    tgt, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    d = save_head(tgt, kind, tmp_path / "head", seed=4)
    summary, _, _ = execute(
        compose(
            [
                f"method={kind}",
                f"method.heads={d}",
                "method.top_k=4",
                "method.total_tokens=12",
                "k=3",
                *tiny_run(tiny_target_dir, tmp_path),
            ]
        ),
        tmp_path,
    )
    ev = json.loads((tmp_path / "distcheck.json").read_text())
    assert 0 < ev["accepted_tokens"] < ev["drafted_tokens"]
    assert summary.dist_pvalue.iloc[0] > 0.01


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_training_learns_and_the_head_is_exact(kind, tiny_target_dir, tmp_path, monkeypatch):
    from groundfloor.models import load_model
    from train import distill, loop

    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path / "cache"))
    tgt, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    words = "write a short poem about the sea and explain the answer step by step".split()
    rows = [
        {
            "question_id": f"t{i}",
            "category": "general",
            "turns": [" ".join(words[i % 5 : i % 5 + 6])],
        }
        for i in range(10)
    ]
    data = distill.build(str(tiny_target_dir), rows, 20, [0, 1, -1], TINY_DISTILL, batch=5)
    spec = EagleSpec(
        data,
        tgt,
        kind,
        steps=2 if kind == "eagle3" else 1,
        eval_steps=2,
        vocab_size=48,
        batch_size=4,
        holdout=0.3,
        base="tiny",
        layers=None if kind == "eagle" else [0, 1, 1],
    )
    before = loop.evaluate(spec)
    assert len(before["top1_per_pos"]) == 2
    result = loop.train(
        spec, tmp_path / "w", steps=25, lr=3e-3, warmup=2, ckpt_every=10, eval_every=10
    )
    assert result["loss_per_pos"][0] < before["loss_per_pos"][0]
    spec.save(tmp_path / "head", result)
    m = eagle_method(tgt, kind, tmp_path / "head")
    ar = build_method("ar", make_ctx(tgt))
    for p in prompts(3, seed=2):
        assert run(m, p, n=24).output_ids == run(ar, p, n=24).output_ids


def drafted_exactly(m, target) -> set:
    """Run `m` on three prompts, each output equal to `ar`'s; → the tokens it drafted."""
    ar = build_method("ar", make_ctx(target))
    seen = set()
    real_draft = m.draft

    def spy(state):
        prop = real_draft(state)
        seen.update(prop.tokens.tolist())
        return prop

    m.draft = spy
    for p in prompts(3, seed=9):
        assert run(m, p, n=24).output_ids == run(ar, p, n=24).output_ids
    return seen


def test_frequency_ranked_draft_vocabulary(target, tmp_path):
    """draft_vocab=N drafts only among the N most frequent ids and stays exact."""
    frequent = list(range(127, 7, -3))  # ids by decreasing frequency
    eagle_io.save(
        random_head(target, "eagle", 5),
        tmp_path,
        "tiny",
        dtype=torch.float32,
        extra={"frequent_ids": frequent},
    )
    m = eagle_method(target, "eagle", tmp_path, draft_vocab=12)
    assert m.info["draft_vocab"] == 12
    seen = drafted_exactly(m, target)
    assert seen and seen <= set(frequent[:12])
    full = eagle_method(target, "eagle", tmp_path, draft_vocab=None)
    assert full.info["draft_vocab"] == 128


def test_the_head_cache_writes_in_place_and_doubles_only_when_full():
    """Appends land in one buffer (the same storage from step to step), rejected entries are
    truncated away and overwritten, and growth past the capacity keeps every entry."""
    g = torch.Generator().manual_seed(0)
    cache, ref = HeadCache(), []
    for step in range(40):
        k = torch.randn(1, 2, 5, 4, generator=g)
        cache.append(k, -k)
        ref.append(k)
        if step == 3:
            storage = cache.k.untyped_storage().data_ptr()
        if 3 < step < 12:  # 64 entries hold the first 12 steps
            assert cache.k.untyped_storage().data_ptr() == storage
        if step % 3 == 2:  # a round whose last 2 drafted entries were rejected
            cache.truncate(len(cache) - 2)
            ref[-1] = ref[-1][..., :3, :]
        want = torch.cat(ref, dim=-2)
        assert len(cache) == want.shape[-2]
        assert torch.equal(cache.k, want) and torch.equal(cache.v, -want)
    assert cache.nbytes() >= 2 * cache.k.numel() * 4


def test_an_eagle3_heads_draft_vocabulary_narrowed_by_frequency(target, tmp_path):
    """draft_vocab=N on an EAGLE-3 head keeps the N rows of its own output layer whose tokens
    rank first in the stored frequency list (in draft-id order; a listed token outside its
    vocabulary is skipped), drafts only those, and stays exact; null keeps them all."""
    head = random_head(target, "eagle3", 5)
    d2t = head.d2t.tolist()
    outside = next(t for t in range(target.config.vocab_size) if t not in d2t)
    frequent = [outside] + d2t[::-2][:20]  # ids by decreasing frequency
    eagle_io.save(head, tmp_path, "tiny", dtype=torch.float32, extra={"frequent_ids": frequent})
    m = eagle_method(target, "eagle3", tmp_path, draft_vocab=12)
    assert m.info["draft_vocab"] == 12 and m.head.lm_head.out_features == 12
    want = set(d2t[::-2][:12])
    assert set(m.head.d2t.tolist()) == want
    assert m.head.d2t.tolist() == sorted(want)  # draft-id order, as the file has them
    rows = [d2t.index(t) for t in sorted(want)]
    assert torch.equal(m.head.lm_head.weight, head.lm_head.weight[rows])
    seen = drafted_exactly(m, target)
    assert seen and seen <= want
    full = eagle_method(target, "eagle3", tmp_path, draft_vocab=None)
    assert full.info["draft_vocab"] == len(d2t) == full.head.lm_head.out_features
