"""Learned drafters in int8 on the native kernels (drafters.weights): the layers keep their
values within int8's rounding, every learned method stays exact, and bad settings are one line."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import tiny_llama
from helpers import eagle_method, make_ctx, prompts, random_heads, run, save_head
from omegaconf import OmegaConf

from drafters import draftmodel, weights
from drafters import medusa as heads_io
from engines.load import wrap
from groundfloor.errors import UserError
from methods.registry import build_method, method_config

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not weights.native_ready("cpu"), reason="no native kernels here"),
]


@pytest.fixture(scope="module")
def target():
    return wrap(tiny_llama(0, layers=4), "lean")


def int8_ctx(target, setting="int8"):
    return dataclasses.replace(make_ctx(target), drafter_weights=setting)


def test_quantize_keeps_the_layers_values_within_int8_rounding():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.SiLU(), torch.nn.Linear(96, 32))
    x = torch.randn(5, 64)
    want = net(x)
    weights.quantize(net)
    assert all(not isinstance(m, torch.nn.Linear) for m in net.modules())
    got = net(x)
    assert got.shape == want.shape
    rel = (got - want).abs().max() / want.abs().max()
    assert 0 < rel < 0.03  # quantized (not the same numbers), within per-row int8's error


def test_settings():
    w = torch.randn(64, 32)
    assert weights.choose("float", w, 4, "cpu") == "float"
    assert weights.choose("int8", w, 4, "cpu") == "int8"
    assert weights.choose("auto", w, 4, "cpu") in ("float", "int8")
    with pytest.raises(UserError, match=r"drafter_weights='int4' is not valid; choose one of"):
        weights.choose("int4", w, 4, "cpu")
    assert weights.choose("auto", w, 4, "meta") == "float"  # no native kernels off the CPU
    with pytest.raises(UserError, match="drafter_weights=int8 needs the native CPU kernels"):
        weights.choose("int8", w, 4, "meta")


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_eagle_heads_in_int8_stay_exact_and_smaller(target, tmp_path, kind):
    d = save_head(target, kind, tmp_path / "head", seed=3)
    f32 = eagle_method(target, kind, d)
    node = OmegaConf.create(
        {"_target_": type(f32).__module__ + "." + type(f32).__name__, "name": kind, "k": 4}
    )
    node.update(heads=str(d), top_k=3, total_tokens=10, budget_ratio=1.5)
    q = build_method(node, int8_ctx(target))
    assert f32.info["drafter_weights"] == "float" and q.info["drafter_weights"] == "int8"
    assert q.static_bytes() < 0.6 * f32.static_bytes()
    ar = build_method("ar", make_ctx(target))
    for p in prompts(4, seed=11):
        base, a, b = run(ar, p), run(f32, p), run(q, p)
        assert a.output_ids == base.output_ids and b.output_ids == base.output_ids
        rounds = len(b.accept_lengths) - 1
        assert b.draft_steps == q.depth * rounds
        # the same tree sizes per round: only the head's numbers changed
        assert a.drafted_tokens / (len(a.accept_lengths) - 1) == b.drafted_tokens / rounds


def test_medusa_and_draft_model_in_int8_stay_exact(target, tmp_path):
    heads_io.save(
        random_heads(target.output_weight().shape[1], 4, 1),
        tmp_path / "heads",
        "tiny",
        extra={"rank_accuracy": [[0.5, 0.2, 0.1]] * 4, "frequent_ids": list(range(4, 100))},
    )
    draftmodel.save(
        draftmodel.from_target(tiny_llama(0, layers=4), 1, torch.arange(4, 68)),
        tmp_path / "draft",
        "tiny",
        dtype=torch.float32,
    )
    ctx = int8_ctx(target)
    md = build_method(
        # the whole tree every round (k=None): k=auto would switch these random heads off
        method_config("medusa", {"heads": str(tmp_path / "heads"), "draft_vocab": 64, "k": None}),
        ctx,
    )
    dm = build_method(method_config("draft", {"model": str(tmp_path / "draft"), "k": 3}), ctx)
    assert md.info["drafter_weights"] == "int8" and dm.info["drafter_weights"] == "int8"
    assert dm.model.describe()["weights"] == "int8"
    ar = build_method("ar", make_ctx(target))
    for p in prompts(4, seed=5):
        base = run(ar, p)
        for m, steps in ((md, 1), (dm, 3)):
            res = run(m, p)
            assert res.output_ids == base.output_ids
            assert res.draft_steps == steps * (len(res.accept_lengths) - 1)


def test_int8_storage_round_trips_within_rounding(target, tmp_path):
    from helpers import random_head
    from safetensors.torch import load_file

    from drafters import eagle as eagle_io
    from drafters import storage

    head = random_head(target, "eagle3", seed=2)
    eagle_io.save(head, tmp_path / "q", "tiny", dtype=torch.float32, int8=("lm_head.weight",))
    eagle_io.save(head, tmp_path / "f", "tiny", dtype=torch.float32)
    raw = load_file(str(tmp_path / "q/model.safetensors"))
    assert raw["lm_head.weight"].dtype == torch.int8 and "lm_head.weight.int8_scale" in raw
    back = storage.read(tmp_path / "q/model.safetensors")
    assert "lm_head.weight.int8_scale" not in back
    w = head.lm_head.weight.detach()
    err = (back["lm_head.weight"].float() - w).abs().max() / w.abs().max()
    assert 0 < err < 0.02
    assert torch.equal(
        storage.get(tmp_path / "q/model.safetensors", "lm_head.weight"), back["lm_head.weight"]
    )
    loaded, _ = eagle_io.load(tmp_path / "q", target)
    assert torch.allclose(loaded.lm_head.weight, back["lm_head.weight"].float())
    assert torch.equal(loaded.fc.weight, eagle_io.load(tmp_path / "f", target)[0].fc.weight)
