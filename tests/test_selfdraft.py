"""`method=draft model.draft=self:int4 | self:q4_1`: the 16-bit target's own 4-bit copy as its draft
(drafters/selfdraft.py). Lossless at temperature 0 (token for token the target's own decoding)
and at temperature 1 (the run's distribution check), its quantization as stated, and every
wrong combination refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import compose
from helpers import GREEDY, prompts, run, tiny_run
from omegaconf import OmegaConf

from bench.run.runner import execute
from drafters import selfdraft
from engines.load import load
from groundfloor.errors import UserError
from methods.registry import Context, build_method, method_config

pytestmark = pytest.mark.usefixtures("one_thread")
FLAT = {1: 0.010, 2: 0.010, 4: 0.010, 8: 0.0102, 16: 0.0105, 64: 0.012}


def ctx_for(target_dir, draft, weights="bfloat16"):
    eng, _ = load(str(target_dir), "cpu", engine="lean", weights=weights)
    cfg = OmegaConf.create({"target": str(target_dir), "draft": draft})
    return Context(eng, None, torch.device("cpu"), eng.dtype, cfg)


def test_symmetric_int4_is_llama_cpps_q4_0_rule():
    w = torch.randn(6, 64, generator=torch.Generator().manual_seed(0))
    b = selfdraft.symmetric_q4(w)
    d = b.d[..., None]
    back = b.dequantize().view(6, 2, 32)
    assert torch.equal(b.m, -8 * b.d) and torch.equal(b.d, b.d.half().float())  # float16 scales
    assert torch.allclose(back, d * (b.q.view(6, 2, 32).float() - 8))
    peak = w.view(6, 2, 32).gather(-1, w.view(6, 2, 32).abs().argmax(-1, keepdim=True))
    assert torch.allclose(peak, back.gather(-1, w.view(6, 2, 32).abs().argmax(-1, keepdim=True)),
                          rtol=1e-3)  # fmt: skip
    err = (back - w.view(6, 2, 32)).abs()
    assert bool((err <= d.abs() * 1.001).all())  # half a step, a whole one where q clamps at 15
    assert bool((err <= d.abs() / 2 * 1.001).float().mean() > 0.9)


def test_the_self_draft_reproduces_the_16_bit_target(tiny_bf16_dir):
    """Greedy: token for token the target's own decoding, with drafts made and accepted."""
    ctx = ctx_for(tiny_bf16_dir, "self:int4")
    ar = build_method(method_config("ar", {}), ctx)
    dr = build_method(method_config("draft", {}), ctx)
    assert dr.info["draft_model"].startswith("self:int4: the target's bfloat16 weights")
    assert dr.model.describe()["kernels"][0].startswith("int4:")
    dr.calibrate(FLAT)
    dr.force_drafting(True)
    drafted = accepted = 0
    for p in prompts(3, seed=3):
        res = run(dr, p, n=24)
        assert res.output_ids == run(ar, p, n=24).output_ids
        drafted += res.drafted_tokens
        accepted += sum(res.accept_lengths) - len(res.accept_lengths)
    assert drafted > 0 and accepted > 0
    assert GREEDY.greedy


def test_the_self_draft_keeps_the_target_distribution_at_temperature_1(tiny_bf16_dir, tmp_path):
    # the distribution check's tiny run (test_distcheck), on the 16-bit target with its self-draft
    extra = ["engine=lean", "model.weights=bfloat16", "model.draft=self:int4"]
    summary, _, _ = execute(
        compose(["method=draft", *tiny_run(tiny_bf16_dir, tmp_path, *extra)]), tmp_path
    )
    ev = json.loads((tmp_path / "distcheck.json").read_text())["tasks"]["code"]
    assert ev["status"] == "tested" and ev["accepted_tokens"] > 0
    assert summary.dist_pvalue.iloc[0] > 0.01


def test_wrong_self_drafts_are_refused_in_one_line(tiny_bf16_dir, tiny_target_dir):
    with pytest.raises(UserError, match=r"model.draft='self:int3' is not valid; choose one of: "
                       r"self:q4_1, self:int4"):  # fmt: skip
        build_method(method_config("draft", {}), ctx_for(tiny_bf16_dir, "self:int3"))
    with pytest.raises(UserError, match="has none: use model.draft=self:int4"):
        build_method(method_config("draft", {}), ctx_for(tiny_bf16_dir, "self:q4_1"))
    with pytest.raises(UserError, match="this target runs model.weights=int4: use model.weights"):
        build_method(method_config("draft", {}), ctx_for(tiny_target_dir, "self:int4", "int4"))


@pytest.mark.slow
def test_the_embedded_q4_1_self_draft_is_the_shipped_file():
    ctx = ctx_for("embedded:smollm2-135m", "self:q4_1")
    dr = build_method(method_config("draft", {}), ctx)
    assert dr.info["draft_model"].startswith("self:q4_1: the shipped Q4_1 file's blocks, native")
    with pytest.raises(UserError, match="drafts with the file the target already runs"):
        ctx = ctx_for("embedded:smollm2-135m", "self:q4_1", "int4")
        build_method(method_config("draft", {}), ctx)


def test_a_self_draft_with_a_draft_vocabulary_is_still_lossless(tiny_bf16_dir, tmp_path):
    """method.draft_vocab: the output layer keeps the draft vocabulary's rows only; drafts are
    those ids, mapped back; the target's decoding is unchanged."""
    from safetensors.torch import save_file

    d2t = torch.arange(0, 128, 2)  # half of the tiny vocabulary
    save_file({"d2t": d2t}, str(tmp_path / "model.safetensors"))
    ctx = ctx_for(tiny_bf16_dir, "self:int4")
    ar = build_method(method_config("ar", {}), ctx)
    dr = build_method(method_config("draft", {"draft_vocab": str(tmp_path)}), ctx)
    assert dr.model.model.output.out_features == 64
    assert dr.info["draft_model"].endswith("output layer reduced to a draft vocabulary of 64")
    dr.calibrate(FLAT)
    dr.force_drafting(True)
    for p in prompts(2, seed=5):
        res = run(dr, p, n=16)
        assert res.output_ids == run(ar, p, n=16).output_ids
    # an EAGLE-3 head's file stores offsets (target id = d + d2t[d]) beside its t2d
    (tmp_path / "e3").mkdir()
    offsets = {"d2t": d2t - torch.arange(64), "t2d": torch.zeros(128, dtype=torch.bool)}
    save_file(offsets, str(tmp_path / "e3" / "model.safetensors"))
    e3 = build_method(method_config("draft", {"draft_vocab": str(tmp_path / "e3")}), ctx)
    assert torch.equal(e3.d2t, d2t)
    with pytest.raises(UserError, match="method.draft_vocab='/nonexistent': no draft vocabulary"):
        build_method(method_config("draft", {"draft_vocab": "/nonexistent"}), ctx)
