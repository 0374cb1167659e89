"""The training pipeline end to end on a tiny target: distillation data, training, resume, load."""
from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from bench.runner import build_method
from bench.train import distill, loop, specs
from drafters import medusa as heads_io
from test_lossless_greedy import make_ctx, prompts, run


@pytest.fixture()
def data(tiny_target_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "prompts.jsonl"
    words = "write a short poem about the sea and explain the answer step by step".split()
    rows = [{"question_id": f"t{i}", "category": "general",
             "turns": [" ".join(words[i % 5: i % 5 + 6])]} for i in range(12)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    d = distill.build(str(tiny_target_dir), f, 24, [1, -1], batch=4)
    assert len(d) == 12 and all(x["hidden"][-1].shape[0] == len(x["ids"]) for x in d)
    again = distill.build(str(tiny_target_dir), f, 24, [1, -1], batch=4)  # from the cache
    assert torch.equal(again[0]["ids"], d[0]["ids"])
    return d


def test_medusa_training_learns_resumes_and_loads(data, tiny_target_dir, tmp_path):
    from bench.models import load_model
    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    spec = specs.MedusaSpec(data, target, num_heads=2, num_layers=1, batch_size=32,
                            holdout=0.25, base="tiny")
    assert set(spec.sizes()) == {"train", "eval"}
    before = loop.evaluate(spec)["loss_per_pos"]
    work = tmp_path / "work"
    loop.train(spec, work, steps=10, lr=1e-2, warmup=2, ckpt_every=5, eval_every=5)
    assert json.loads((work / "train_log.jsonl").read_text().splitlines()[-1])["step"] == 10
    spec2 = specs.MedusaSpec(data, target, 2, 1, 32, 0.25, "tiny")
    result = loop.train(spec2, work, steps=40, lr=1e-2, warmup=2, ckpt_every=5, eval_every=20)
    steps = [json.loads(x)["step"] for x in (work / "train_log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 41))  # resumed at 11, not restarted
    assert result["loss_per_pos"][0] < before[0]
    out = tmp_path / "heads"
    spec2.save(out, result)
    heads, cfg = heads_io.load(out)
    assert len(cfg["rank_accuracy"]) == 2 and cfg["shared_lm_head"]
    ctx = make_ctx(target)
    ar = build_method({"_target_": "methods.ar.AR", "name": "ar", "k": 0}, ctx)
    md = build_method(OmegaConf.create({"_target_": "methods.medusa.Medusa", "name": "medusa",
                                        "heads": str(out), "tree": "auto", "tree_size": 6}), ctx)
    for p in prompts(3):
        assert run(md, p).output_ids == run(ar, p).output_ids


def test_training_prompts_are_generated_deterministically():
    from bench.train import prompts as tp
    a, b = tp.build(), tp.build()
    assert a == b and len(a) >= 300
    assert len({r["turns"][0] for r in a}) == len(a)


def test_distilled_draft_trains_saves_and_is_exact(data, tiny_target_dir, tmp_path):
    from bench.models import load_model
    from drafters import draftmodel
    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    spec = specs.DraftSpec(data, target, num_layers=1, vocab_size=40, batch_size=4,
                           holdout=0.25, base="tiny")
    assert spec.d2t.numel() == 40 and 0 < spec.coverage <= 1
    before = loop.evaluate(spec)["loss_per_pos"][0]
    result = loop.train(spec, tmp_path / "w", steps=30, lr=3e-3, warmup=2, ckpt_every=10,
                        eval_every=10)
    assert result["loss_per_pos"][0] < before
    out = tmp_path / "draft"
    spec.save(out, result)
    assert draftmodel.is_distilled(out)
    draft = draftmodel.load(out, target, torch.float32)
    assert draft.model.embed_tokens if hasattr(draft.model, "embed_tokens") else True
    assert draft.embed.data_ptr() == target.get_input_embeddings().weight.data_ptr()
    ctx = make_ctx(target)
    ar = build_method({"_target_": "methods.ar.AR", "name": "ar", "k": 0}, ctx)
    dr = build_method(OmegaConf.create({"_target_": "methods.draft.Draft", "name": "draft",
                                        "k": 3, "model": str(out)}), ctx)
    for p in prompts(4):
        assert run(dr, p).output_ids == run(ar, p).output_ids
