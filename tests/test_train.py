"""The training pipeline end to end on a tiny target: distillation data, training, resume, load."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import TINY_DISTILL, make_ctx, prompts, run
from omegaconf import OmegaConf

from drafters import medusa as heads_io
from methods.registry import build_method
from train import distill, loop, specs


@pytest.fixture()
def data(tiny_target_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path / "cache"))
    words = "write a short poem about the sea and explain the answer step by step".split()
    rows = [
        {
            "question_id": f"t{i}",
            "category": "general",
            "turns": [" ".join(words[i % 5 : i % 5 + 6])],
        }
        for i in range(12)
    ]
    d = distill.build(str(tiny_target_dir), rows, 24, [1, -1], TINY_DISTILL, batch=4)
    assert len(d) == 12 and all(x["hidden"][-1].shape[0] == len(x["ids"]) for x in d)
    assert {x["temperature"] for x in d} == {0.0, 1.0}  # greedy and sampled answers
    # against the target itself: each sequence's states are a fresh forward's over its ids, and
    # a greedy answer takes the argmax at every position (teacher-forced; near-ties allowed)
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(str(tiny_target_dir), dtype=torch.float32).eval()
    for x in d:
        with torch.no_grad():
            out = ref(x["ids"][None], output_hidden_states=True)
        for layer in (1, -1):  # stored in bfloat16: its rounding, 2⁻⁸ relative
            assert torch.allclose(
                x["hidden"][layer].float(), out.hidden_states[layer][0], rtol=1e-2, atol=1e-2
            ), layer
        if x["temperature"] == 0:
            lg = out.logits[0, x["start"] - 1 : -1]
            took = lg.gather(1, x["ids"][x["start"] :, None])[:, 0]
            assert (took >= lg.max(-1).values - 1e-4).all()
    # a second build is served from the cache: no decoding, the same sequences
    monkeypatch.setattr(distill, "decode_batch", lambda *a, **k: pytest.fail("re-decoded"))
    again = distill.build(str(tiny_target_dir), rows, 24, [1, -1], TINY_DISTILL, batch=4)
    assert all(
        torch.equal(a["ids"], b["ids"]) and torch.equal(a["hidden"][-1], b["hidden"][-1])
        for a, b in zip(again, d)
    )
    return d


def test_medusa_training_learns_resumes_and_loads(data, tiny_target_dir, tmp_path):
    from groundfloor.models import load_model

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    spec = specs.MedusaSpec(
        data, target, num_heads=2, num_layers=1, batch_size=32, holdout=0.25, base="tiny"
    )
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
    ar = build_method("ar", ctx)
    md = build_method(
        OmegaConf.create(
            {
                "_target_": "methods.medusa.Medusa",
                "name": "medusa",
                "heads": str(out),
                "tree": "auto",
                "tree_size": 6,
            }
        ),
        ctx,
    )
    for p in prompts(3):
        assert run(md, p).output_ids == run(ar, p).output_ids


def test_training_prompts_are_generated_deterministically():
    from train import prompts as tp

    a, b = tp.build(), tp.build()
    assert a == b and len(a) >= 300
    assert len({r["turns"][0] for r in a}) == len(a)


def test_distilled_draft_trains_saves_and_is_exact(data, tiny_target_dir, tmp_path):
    from drafters import draftmodel
    from groundfloor.models import load_model

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    spec = specs.DraftSpec(
        data, target, num_layers=1, vocab_size=40, batch_size=4, holdout=0.25, base="tiny"
    )
    assert spec.d2t.numel() == 40 and 0 < spec.coverage <= 1
    before = loop.evaluate(spec)["loss_per_pos"][0]
    result = loop.train(
        spec, tmp_path / "w", steps=30, lr=3e-3, warmup=2, ckpt_every=10, eval_every=10
    )
    assert result["loss_per_pos"][0] < before
    out = tmp_path / "draft"
    spec.save(out, result)
    assert draftmodel.is_distilled(out)
    draft = draftmodel.load(out, target, torch.float32)
    from safetensors.torch import load_file

    saved = load_file(str(out / "model.safetensors"))
    assert not any("embed_tokens" in key for key in saved)  # the target's table, never a copy
    assert draft.embed.data_ptr() == target.get_input_embeddings().weight.data_ptr()
    ctx = make_ctx(target)
    ar = build_method("ar", ctx)
    dr = build_method(
        OmegaConf.create(
            {"_target_": "methods.draft.Draft", "name": "draft", "k": 3, "model": str(out)}
        ),
        ctx,
    )
    for p in prompts(4):
        assert run(dr, p).output_ids == run(ar, p).output_ids


def test_distilled_draft_continues_from_a_saved_one(data, tiny_target_dir, tmp_path):
    from groundfloor.errors import UserError
    from groundfloor.models import load_model

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    kw = dict(num_layers=1, batch_size=4, holdout=0.25, base="tiny")
    torch.manual_seed(0)
    first = specs.DraftSpec(data, target, vocab_size=12, **kw)
    loop.train(first, tmp_path / "w", steps=6, lr=3e-3, warmup=1, ckpt_every=6, eval_every=6)
    first.save(tmp_path / "draft", {})
    again = specs.DraftSpec(data, target, vocab_size=30, init=str(tmp_path / "draft"), **kw)
    assert again.d2t.tolist() == first.d2t.tolist()  # its vocabulary, not 30 ids
    assert again.module.training and all(p.requires_grad for p in again.module.parameters())
    saved = first.module.state_dict()
    for k, v in again.module.state_dict().items():
        if "rotary" in k:
            continue
        # bfloat16 files (the head int8 per row): the saved values, to their rounding
        assert torch.allclose(v.float(), saved[k].float(), rtol=2e-2, atol=2e-2), k
    loss0 = loop.held_out_loss(loop.evaluate(again))
    assert loss0 == pytest.approx(loop.held_out_loss(loop.evaluate(first)), rel=0.05)
    assert loss0 != pytest.approx(
        loop.held_out_loss(loop.evaluate(specs.DraftSpec(data, target, vocab_size=12, **kw))),
        rel=1e-3,
    )  # a new draft from the target's layers scores otherwise: the saved one was loaded

    refit = specs.DraftSpec(
        data, target, vocab_size=7, init=str(tmp_path / "draft"), keep_vocab=False, **kw
    )
    want, _ = specs.draft_vocab(refit.seqs, target.config.vocab_size, 7)
    assert refit.d2t.tolist() == want.tolist() == refit.module.d2t.tolist()
    old_rows = {t: i for i, t in enumerate(again.d2t.tolist())}
    lm = target.get_output_embeddings().weight
    for i, t in enumerate(want.tolist()):  # a token's row follows it; new ones: the target's
        row = again.module.head.weight[old_rows[t]] if t in old_rows else lm[t]
        assert torch.equal(refit.module.head.weight[i], row)
    assert (refit.t2d[want] == torch.arange(7)).all()

    with pytest.raises(UserError, match="is not a saved draft model"):
        specs.DraftSpec(data, target, vocab_size=12, init=str(tmp_path / "nowhere"), **kw)
    with pytest.raises(UserError, match=r"has 1 layer\(s\); drafter.num_layers=2"):
        specs.DraftSpec(
            data, target, vocab_size=12, init=str(tmp_path / "draft"), **{**kw, "num_layers": 2}
        )


def test_medusa_heads_continue_from_saved_ones(data, tiny_target_dir, tmp_path):
    from groundfloor.errors import UserError
    from groundfloor.models import load_model

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    kw = dict(num_heads=2, num_layers=1, batch_size=16, holdout=0.25, base="tiny")
    first = specs.MedusaSpec(data, target, **kw)
    loop.train(first, tmp_path / "w", steps=6, lr=1e-2, warmup=1, ckpt_every=6, eval_every=6)
    first.save(tmp_path / "heads", {})
    again = specs.MedusaSpec(data, target, init=str(tmp_path / "heads"), **kw)
    assert again.module.training and all(p.requires_grad for p in again.module.parameters())
    saved = first.module.state_dict()
    assert any(v.abs().sum() > 0 for v in saved.values())  # trained: not the zero start
    for k, v in again.module.state_dict().items():  # stored in bfloat16: to its rounding
        assert v.dtype == torch.float32 and torch.allclose(v, saved[k], rtol=1e-2, atol=1e-3), k
    loss0 = loop.held_out_loss(loop.evaluate(again))
    assert loss0 == pytest.approx(loop.held_out_loss(loop.evaluate(first)), rel=0.02)
    fresh = loop.held_out_loss(loop.evaluate(specs.MedusaSpec(data, target, **kw)))
    assert loss0 != pytest.approx(fresh, rel=1e-4)  # new heads score otherwise: these were loaded
    assert heads_io.load(tmp_path / "heads")[0].num_heads == 2
    again.save(tmp_path / "again", {})
    saved_cfg = json.loads((tmp_path / "again" / "config.json").read_text())
    assert saved_cfg["init"] == str(tmp_path / "heads")

    with pytest.raises(UserError, match="holds no Medusa heads"):
        specs.MedusaSpec(data, target, init=str(tmp_path / "nowhere"), **kw)
    with pytest.raises(UserError, match=r"has 2 head\(s\) of 1 layer\(s\); drafter.num_heads=3"):
        specs.MedusaSpec(data, target, init=str(tmp_path / "heads"), **{**kw, "num_heads": 3})
    H = target.lm_head.weight.shape[1]
    with pytest.raises(UserError, match=rf"hidden size {H}; this target's hidden size is {H + 8}"):
        specs.warm_medusa(tmp_path / "heads", 2, 1, H + 8)


def _medusa(data, target, seed):
    torch.manual_seed(seed)  # as `python -m train` does before building the drafter
    return specs.MedusaSpec(
        data, target, num_heads=2, num_layers=1, batch_size=16, holdout=0.25, base="tiny"
    )


def _eagle(data, target, seed):
    from train.eagle_spec import EagleSpec

    torch.manual_seed(seed)
    return EagleSpec(
        data,
        target,
        "eagle",
        steps=2,
        eval_steps=2,
        vocab_size=None,
        batch_size=8,
        holdout=0.25,
        base="tiny",
        layers=None,
    )


@pytest.mark.parametrize("make", [_medusa, _eagle], ids=["medusa", "eagle"])
def test_training_is_reproducible_and_a_resumed_run_equals_an_uninterrupted_one(
    data, tiny_target_dir, tmp_path, make
):
    from groundfloor.models import load_model

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    kw = dict(steps=12, lr=1e-2, warmup=2, ckpt_every=4, eval_every=4, seed=3)
    a, b = make(data, target, 0), make(data, target, 0)
    loop.train(a, tmp_path / "a", **kw)
    loop.train(b, tmp_path / "b", **kw)
    for (k, x), y in zip(a.module.state_dict().items(), b.module.state_dict().values()):
        assert torch.equal(x, y), k  # same seed, same weights, bitwise
    # the same run interrupted after step 6 (its last checkpoint is step 4), then resumed
    c = make(data, target, 0)
    real, calls = c.step_loss, []

    def dies_at_step_7(batch):
        calls.append(1)
        if len(calls) == 7:
            raise KeyboardInterrupt
        return real(batch)

    c.step_loss = dies_at_step_7
    with pytest.raises(KeyboardInterrupt):
        loop.train(c, tmp_path / "c", **kw)
    c.step_loss = real
    resumed = make(data, target, 0)
    loop.train(resumed, tmp_path / "c", **kw)
    for (k, x), y in zip(a.module.state_dict().items(), resumed.module.state_dict().values()):
        assert torch.equal(x, y), k
    other = make(data, target, 0)  # another seed for the batch order: other weights
    loop.train(other, tmp_path / "d", **dict(kw, seed=4))
    assert not all(
        torch.equal(x, y)
        for x, y in zip(a.module.state_dict().values(), other.module.state_dict().values())
    )


def test_a_checkpoint_resumes_only_under_the_settings_that_wrote_it(
    data, tiny_target_dir, tmp_path
):
    from groundfloor.errors import UserError
    from groundfloor.models import load_model
    from train.__main__ import resume_settings

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    work, kw = tmp_path / "w", dict(lr=1e-2, warmup=2, ckpt_every=2, eval_every=2)
    first = {"limit": 12, "drafter": {"name": "medusa", "init": None, "lr": 0.01}}
    loop.train(_medusa(data, target, 0), work, steps=4, settings=first, **kw)
    before = (work / "checkpoint.pt").read_bytes()
    # another run's settings (here: continuing from a saved head) do not resume it
    other = {"limit": 12, "drafter": {"name": "medusa", "init": "heads/old", "lr": 0.01}}
    with pytest.raises(UserError, match=r"drafter\.init None → 'heads/old'.*resume=false"):
        loop.train(_medusa(data, target, 0), work, steps=8, settings=other, **kw)
    with pytest.raises(UserError, match="drafter.init"):  # the CLI asks before building data
        loop.check_resume(work, other)
    assert (work / "checkpoint.pt").read_bytes() == before  # left as it is
    # its own settings resume it, here for a longer run
    loop.train(_medusa(data, target, 0), work, steps=6, settings=first, **kw)
    log = [json.loads(x)["step"] for x in (work / "train_log.jsonl").read_text().splitlines()]
    assert log == [1, 2, 3, 4, 5, 6]
    # resume=false trains afresh there: the log and the checkpoint are the new run's
    loop.train(_medusa(data, target, 0), work, steps=2, settings=other, resume=False, **kw)
    log = [json.loads(x)["step"] for x in (work / "train_log.jsonl").read_text().splitlines()]
    assert log == [1, 2]
    loop.check_resume(work, other)
    # the CLI's settings: the whole resolved config but the step count, checkpoint interval,
    # artifact folder and the resume switch
    cfg = OmegaConf.create(
        {
            "out": "a/${drafter.name}",
            "resume": True,
            "limit": 3,
            "drafter": {"name": "eagle3", "steps": 9, "ckpt_every": 2, "init": "x", "lr": 0.1},
        }
    )
    assert resume_settings(cfg) == {
        "limit": 3,
        "drafter": {"name": "eagle3", "init": "x", "lr": 0.1},
    }


def test_early_stopping_keeps_the_best_held_out_weights(data, tiny_target_dir, tmp_path):
    from groundfloor.models import load_model

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    spec = _medusa(data, target, 0)
    # a learning rate this high makes the held-out loss worse after the first evaluation
    result = loop.train(
        spec, tmp_path / "w", steps=60, lr=5.0, warmup=1, ckpt_every=10, eval_every=2, patience=2
    )
    log = [json.loads(x) for x in (tmp_path / "w" / "train_log.jsonl").read_text().splitlines()]
    evals = [loop.held_out_loss(r["eval"]) for r in log if "eval" in r]
    assert result["stopped_early_at"] is not None and result["steps"] < 60
    assert result["best_held_out_loss"] == pytest.approx(min(evals))
    again = loop.evaluate(spec, max_batches=20)  # the restored weights are the best ones
    assert loop.held_out_loss(again) == pytest.approx(min(evals), rel=1e-5)
    assert len(result["train_minus_held_out_top1"]) == 2


def test_each_drafter_yaml_names_its_training_spec():
    """Training is chosen by the `_target_` of conf/drafter/<name>.yaml, no list in code."""
    from omegaconf import OmegaConf

    from groundfloor.errors import UserError
    from groundfloor.paths import CONF
    from train.__main__ import spec_class

    for path in sorted((CONF / "drafter").glob("*.yaml")):
        cfg = OmegaConf.create({"drafter": OmegaConf.load(path), "target": "unused"})
        cls = spec_class(cfg)
        assert hasattr(cls, "from_config") and hasattr(cls, "needed_layers"), path.name
        if cfg.drafter.name != "eagle3":  # eagle3's taps need the target's depth
            assert cls.needed_layers(cfg) == ([] if cfg.drafter.name == "draft" else [-1])
    bad = OmegaConf.create({"drafter": {"name": "mystery", "_target_": "bench.nowhere.Spec"}})
    with pytest.raises(UserError, match="drafter=mystery: cannot import 'bench.nowhere.Spec'"):
        spec_class(bad)


def test_a_coverage_vocabulary_is_the_fewest_frequent_ids_covering_the_held_out_answers():
    train = torch.tensor([50, 0, 30, 10, 5, 5])  # ranked by the training answers: 0, 2, 3, 4, 5
    held = torch.tensor([40, 0, 40, 15, 4, 1])
    ids, cov = specs.coverage_vocab(train, held, goal=0.95)
    assert ids.tolist() == [0, 2, 3] and cov == pytest.approx(0.95)
    ids, cov = specs.coverage_vocab(train, held, goal=0.99)
    assert ids.tolist() == [0, 2, 3, 4] and cov == pytest.approx(0.99)
    assert specs.coverage_vocab(train, held, goal=0.99, cap=2)[0].tolist() == [0, 2]
    seqs = {
        "train": [{"ids": torch.tensor([9, 0, 0, 2]), "start": 1}],
        "eval": [{"ids": torch.tensor([9, 2, 3]), "start": 1}],
    }
    ids, cov = specs.draft_vocab(seqs, 6, 1)
    assert ids.tolist() == [0] and cov == 0.0  # the held-out answers hold no 0
    with pytest.raises(Exception, match="vocab_size='lots' is not valid"):
        specs.draft_vocab(seqs, 6, "lots")


def test_an_eagle3_head_continues_from_a_saved_head_with_its_vocabulary(
    data, tiny_target_dir, tmp_path
):
    from groundfloor.errors import UserError
    from groundfloor.models import load_model
    from train.eagle_spec import EagleSpec

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    kw = dict(steps=2, eval_steps=2, batch_size=8, holdout=0.25, base="tiny", layers=[1, 1, -1])
    torch.manual_seed(0)
    first = EagleSpec(data, target, "eagle3", vocab_size=5, **kw)
    loop.train(first, tmp_path / "w1", steps=4, lr=1e-2, warmup=1, ckpt_every=4, eval_every=4)
    first.save(tmp_path / "head", {})
    torch.manual_seed(1)  # another seed: a fresh head would start elsewhere
    again = EagleSpec(data, target, "eagle3", vocab_size=50, init=str(tmp_path / "head"), **kw)
    assert again.module.d2t.tolist() == first.module.d2t.tolist()  # its vocabulary, not 50 ids
    assert again.module.training and all(p.requires_grad for p in again.module.parameters())
    saved = first.module.state_dict()
    for k, v in again.module.state_dict().items():
        if k.startswith("rotary."):
            continue
        # bfloat16 files (the output layer int8 per row): the saved values, to their rounding
        assert torch.allclose(v.float(), saved[k].float(), rtol=2e-2, atol=2e-2), k
    loss0 = loop.held_out_loss(loop.evaluate(again))
    assert loss0 == pytest.approx(loop.held_out_loss(loop.evaluate(first)), rel=0.05)
    refit = EagleSpec(
        data, target, "eagle3", vocab_size=7, init=str(tmp_path / "head"), keep_vocab=False, **kw
    )
    want, _ = specs.draft_vocab(refit.seqs, target.config.vocab_size, 7)
    assert refit.module.d2t.tolist() == want.tolist() != first.module.d2t.tolist()
    old_rows = {t: i for i, t in enumerate(again.module.d2t.tolist())}
    kept = [(i, old_rows[t]) for i, t in enumerate(want.tolist()) if t in old_rows]
    assert kept and len(kept) < 7  # some tokens in both vocabularies, some new
    w_new, w_old = refit.module.lm_head.weight, again.module.lm_head.weight
    for i, j in kept:
        assert torch.equal(w_new[i], w_old[j])  # a token's row follows it
    assert refit.module.lm_head.weight.requires_grad
    refit.save(tmp_path / "refit", {})
    assert json.loads((tmp_path / "refit" / "config.json").read_text())["draft_vocab_size"] == 7
    with pytest.raises(UserError, match="is not a head directory"):
        EagleSpec(data, target, "eagle3", vocab_size=5, init=str(tmp_path / "nowhere"), **kw)
    with pytest.raises(UserError, match="is a eagle3 head over target layers"):
        EagleSpec(data, target, "eagle", vocab_size=None, init=str(tmp_path / "head"), **kw)


def test_precision_auto_is_chosen_by_the_instruction_set(monkeypatch):
    """auto: bfloat16 autocast where engines.cpu reports avx512_bf16 or amx_bf16, float32
    elsewhere, with the flag that chose it; a value outside the three is one line."""
    from engines import cpu
    from groundfloor.errors import UserError

    for flags, want in (
        ({"avx2", "avx512f", "avx512_bf16"}, "bfloat16"),
        ({"avx2", "amx_bf16", "amx_tile"}, "bfloat16"),
        ({"avx2", "fma", "avx512f", "avx512_vnni"}, "float32"),
        (set(), "float32"),
    ):
        monkeypatch.setattr(cpu, "cpu_flags", lambda f=frozenset(flags): f)
        got, why = loop.resolve_precision("auto")
        assert got == want and why.startswith("auto: "), (flags, why)
        assert ("avx512_bf16" in why) == ("avx512_bf16" in flags or want == "float32")
        assert loop.resolve_precision("float32")[0] == "float32"
        assert loop.resolve_precision("bfloat16")[0] == "bfloat16"
    with pytest.raises(UserError) as e:
        loop.resolve_precision("fp8")
    assert str(e.value) == "precision='fp8' is not valid; choose one of: auto, float32, bfloat16"


def test_bfloat16_autocast_trains_an_eagle3_head_with_float32_weights(
    data, tiny_target_dir, tmp_path
):
    """precision=bfloat16: the forward and the loss under CPU autocast (bfloat16 products), the
    weights, gradients and AdamW's moments float32; the held-out loss falls as in float32, and
    the held-out evaluation itself runs in float32."""
    from groundfloor.models import load_model
    from train.eagle_spec import EagleSpec

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    kw = dict(steps=2, eval_steps=2, batch_size=4, holdout=0.25, base="tiny", layers=[1, 1, -1])
    run_kw = dict(steps=24, lr=1e-2, warmup=2, ckpt_every=24, eval_every=12, seed=1)
    heads, losses = {}, {}
    for precision in ("float32", "bfloat16"):
        torch.manual_seed(0)
        spec = EagleSpec(data, target, "eagle3", vocab_size=40, soft=True, **kw)
        before = loop.held_out_loss(loop.evaluate(spec))
        seen = []
        real = spec.step_loss

        def watched(batch, real=real):
            seen.append((torch.is_autocast_enabled("cpu"), spec.module.training))
            loss, per, acc = real(batch)
            return loss, per, acc

        spec.step_loss = watched
        result = loop.train(spec, tmp_path / precision, precision=precision, **run_kw)
        assert result["precision"] == precision
        losses[precision] = loop.held_out_loss(result)
        assert losses[precision] < before - 0.1, (precision, before, losses)
        on = precision == "bfloat16"
        assert {s for s in seen if s[1]} == {(on, True)}  # training steps: autocast iff bf16
        assert {s for s in seen if not s[1]} == {(False, False)}  # evaluations: float32
        assert all(p.dtype == torch.float32 for p in spec.module.parameters())
        ckpt = torch.load(tmp_path / precision / "checkpoint.pt", weights_only=False)
        moments = [t for st in ckpt["opt"]["state"].values() for t in st.values() if t.numel() > 1]
        assert moments and all(t.dtype == torch.float32 for t in moments)
        heads[precision] = spec.module.state_dict()
    assert losses["bfloat16"] == pytest.approx(losses["float32"], abs=0.02)
    assert any(  # bfloat16 products: other weights than float32's
        not torch.equal(a, heads["bfloat16"][k]) for k, a in heads["float32"].items()
    )
    with pytest.raises(Exception, match="precision='auto': give float32 or bfloat16"):
        loop.train(spec, tmp_path / "x", precision="auto", **run_kw)


def test_a_schedule_goes_on_from_sitting_to_sitting(data, tiny_target_dir, tmp_path):
    """schedule=continue: a second sitting takes up the first's step, learning rate and place in
    the data (the batches of both sittings are one uninterrupted run's), re-warms the moments,
    stops at the schedule's end, and refuses other data or a bad kind in one line."""
    from groundfloor.errors import UserError
    from groundfloor.models import load_model
    from train import schedule

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    seen: dict[str, list] = {}

    def spec_for(name: str):
        spec = _eagle(data, target, 0)
        real = spec.step_loss

        def step_loss(batch):
            if spec.module.training:
                seen.setdefault(name, []).append(batch[0].sum().item())
            return real(batch)

        spec.step_loss = step_loss
        return spec

    first = spec_for("one")
    batches = first.epoch_batches()
    assert batches == -(-len(first.seqs["train"]) // 8)
    key = schedule.data_key([s["id"] for s in first.seqs["train"]], 3, 8)
    kw = dict(lr=1e-2, warmup=2, ckpt_every=100, eval_every=100, seed=3)
    whole = schedule.Schedule.fresh(3 * batches, 1e-2, 2, key)
    loop.train(first, tmp_path / "whole", steps=3 * batches, schedule=whole, **kw)

    head = tmp_path / "head"
    head.mkdir()
    s1, line = schedule.plan("continue", str(head), 99, 1e-2, 2, 3, batches, key)
    assert "begun" in line and (s1.step, s1.total) == (0, 3 * batches)
    r1 = loop.train(spec_for("two"), tmp_path / "s1", steps=batches + 1, schedule=s1, **kw)
    summary = {"schedule": s1.after(r1["steps"], **r1["stream"], sitting={"cpu": "here"})}
    (head / "train_summary.json").write_text(json.dumps(summary))

    s2, line = schedule.plan("continue", str(head), 99, 5e-3, 2, 3, batches, key)
    assert f"step {batches + 1} of {3 * batches}" in line and s2.lr == 1e-2
    r2 = loop.train(spec_for("two"), tmp_path / "s2", steps=99, schedule=s2, **kw)
    assert r2["steps"] == 2 * batches - 1  # the schedule's steps left, not 99
    assert seen["two"] == seen["one"]  # the data stream went on where the first sitting stopped
    rates = [
        json.loads(x)["lr"] for x in (tmp_path / "s2/train_log.jsonl").read_text().splitlines()
    ]
    g, total = batches + 1, 3 * batches  # its first step: half the rate (re-warm) at step g
    assert s2.factor(0) == pytest.approx(0.5 * 0.5 * (1 + math.cos(math.pi * g / total)))
    assert rates[0] == pytest.approx(1e-2 * s2.factor(1))  # logged after the step: the next one's
    fresh = schedule.Schedule.fresh(10, 1e-2, 3)  # a first sitting: warm-up, then the cosine
    assert [fresh.factor(s) for s in (0, 2, 5, 10)] == pytest.approx(
        [1 / 3 * 0.5 * (1 + math.cos(0)), 0.5 * (1 + math.cos(math.pi * 0.2)), 0.5, 0.0]
    )
    done = s2.after(r2["steps"], **r2["stream"], sitting={})
    assert done["step"] == 3 * batches and len(done["sittings"]) == 2

    (head / "train_summary.json").write_text(json.dumps({"schedule": done}))
    with pytest.raises(UserError, match=rf"schedule is done \({3 * batches} of {3 * batches}"):
        schedule.plan("continue", str(head), 9, 1e-2, 2, 3, batches, key)
    with pytest.raises(UserError, match="other training data"):
        schedule.plan("continue", str(head), 9, 1e-2, 2, 3, batches, "another")
    with pytest.raises(UserError, match="schedule='again' is not valid; choose one of: new"):
        schedule.plan("again", None, 9, 1e-2, 2, 3, batches, key)
    with pytest.raises(UserError, match="needs drafter.init"):
        schedule.plan("continue", None, 9, 1e-2, 2, 3, batches, key)


def test_on_policy_branches_are_the_targets_own_forwards(tiny_target_dir):
    """The target's teacher after each drafted token, from one forward of the prefix with every
    chain appended under the tree mask, equals a plain forward of that chain's own sequence."""
    from groundfloor.models import load_model
    from train import onpolicy

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    g = torch.Generator().manual_seed(0)
    V = target.config.vocab_size
    ids = torch.randint(0, V, (20,), generator=g)
    starts, chains = [3, 9, 14], torch.randint(0, V, (3, 2), generator=g)
    rows = target.get_output_embeddings().weight.detach().float()[:50]
    got = onpolicy.branch_teachers(target, rows, ids, starts, chains)
    for c, t in enumerate(starts):
        seq = torch.cat([ids[: t + 2], chains[c]])
        with torch.no_grad():
            h = target.model(input_ids=seq[None]).last_hidden_state[0, t + 2 :]
        assert torch.allclose(got[c], torch.softmax(h @ rows.T, -1), atol=1e-5), c
    # which chains are still on the data: step j's chain at s drafted the data's tokens so far
    tok = torch.tensor([[5, 6, 7, 8]])
    drafted = [torch.tensor([[6, 9, 8, 0]]), torch.tensor([[7, 7, 8, 0]])]
    assert onpolicy.next_input(drafted[0], tok).tolist() == [[5, 6, 9, 8]]
    matched = onpolicy.still_on_data(drafted, tok)
    assert matched[1].tolist() == [[True, True, False, True]]
    assert matched[2].tolist() == [[True, False, True, False]]  # s = 3: its step 2 was off


def test_on_policy_distillation_trains_and_equals_the_plain_loss_on_the_data(
    data, tiny_target_dir, monkeypatch, tmp_path
):
    """drafter.onpolicy: a head that drafts the data's own tokens has the plain training-time
    test's loss exactly; one that does not is scored by the target's branches and trains; the
    option refuses a head with nothing to draft or no teacher in one line."""
    from groundfloor.errors import UserError
    from groundfloor.models import load_model
    from train import onpolicy
    from train.eagle_spec import EagleSpec

    target, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)

    def spec(chains: int) -> EagleSpec:
        torch.manual_seed(0)
        return EagleSpec(data, target, "eagle", 3, 3, None, 4, 0.25, "tiny", soft=True,
                         chains=chains)  # fmt: skip

    plain, on = spec(0), spec(4)
    batch = next(plain.batches("train", torch.Generator().manual_seed(1)))
    tok = batch[0][:, 1 : batch[2].shape[1] + 1]
    real = onpolicy.draw
    monkeypatch.setattr(onpolicy, "draw", lambda *a: torch.cat([tok[:, 1:], tok[:, -1:]], 1))
    a, b = plain.step_loss(batch), on.step_loss(batch)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    monkeypatch.setattr(onpolicy, "draw", real)
    branch, called = onpolicy.branch_teachers, []
    monkeypatch.setattr(onpolicy, "branch_teachers", lambda *x: called.append(1) or branch(*x))
    loss, per, _ = on.step_loss(batch)
    assert called and torch.isfinite(loss) and per.shape == (3,)
    # the target scores only chains whose every step has a label: no branch teacher is wasted
    labels = batch[2]
    for seed in range(8):
        torch.manual_seed(seed)
        L = labels.shape[1]
        feat = on.module.fuse([h[:, :L] for h in batch[1][: len(on.layers)]])
        soft = torch.softmax(batch[1][-1][:, 1 : L + 1] @ on.teacher.T, dim=-1)
        pos = torch.arange(L)[None].expand(len(labels), L)
        _, teach = on._on_policy(batch, feat, tok, pos, soft, 3)
        for j in (2, 3):
            branched = teach.held[j - 1] & ~teach.on_data[j - 1]
            assert not (branched & (labels == -100)).any(), (seed, j)
    before = loop.evaluate(on)["loss_per_pos"]
    loop.train(on, tmp_path / "w", steps=12, lr=1e-2, warmup=2, ckpt_every=100, eval_every=100)
    assert loop.evaluate(on)["loss_per_pos"][0] < before[0]
    with pytest.raises(
        UserError, match=r"drafter.onpolicy=4 needs .*drafter.unroll ≥ 2 \(here 1\)"
    ):
        EagleSpec(data, target, "eagle", 1, 3, None, 4, 0.25, "tiny", soft=True, chains=4)
