"""transformers' own speculative modes as in-run peers (`hf_pld`, `hf_assisted`): driven whole
by bench.decode.wholeturn under our clock, budget and EOS rule, and exact against our `ar` at
T = 0."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from conftest import tiny_llama
from helpers import make_ctx, method, prompts, run
from omegaconf import OmegaConf

from engines.load import wrap
from methods.registry import build_method

pytestmark = pytest.mark.usefixtures("one_thread")

PLD = {
    "_target_": "methods.hf_pld.HFPromptLookup",
    "name": "hf_pld",
    "engine": "hf",
    "k": 4,
    "max_n": 3,
}
ASSISTED = {
    "_target_": "methods.hf_assisted.HFAssisted",
    "name": "hf_assisted",
    "engine": "hf",
    "k": 3,
    "model": None,
    "schedule": "constant",
    "confidence": 0.0,
}


@pytest.fixture(scope="module")
def target():
    return wrap(tiny_llama(0), "hf")


def peer(cfg, ctx, **kw):
    return build_method(OmegaConf.create(dict(cfg, **kw)), ctx)


def test_hf_pld_reproduces_ar_and_counts_rounds(target):
    ctx = make_ctx(target, 4)
    ar, pld = method("ar", ctx), peer(PLD, ctx)
    drafted = 0
    for p in prompts(6, seed=5):
        base, res = run(ar, p), run(pld, p)
        assert res.output_ids == base.output_ids
        assert sum(res.accept_lengths) == len(res.output_ids)  # one streamed round per forward
        assert res.target_forwards == len(res.accept_lengths)
        assert res.accepted_tokens == sum(res.accept_lengths) - len(res.accept_lengths)
        assert (
            res.accepted_per_pos[:1] == [sum(a > 1 for a in res.accept_lengths)]
            or not res.accepted_per_pos
        )
        t = res.times_ns
        assert t["prefill"] > 0 and t["verify"] > 0 and 0 < t["ttft"] < t["wall"]
        assert t["prefill"] + t["verify"] + t["other"] <= t["wall"] * 1.001
        drafted += res.drafted_tokens
    assert drafted > 0  # lookups happened, so verification of drafts was exercised


def test_sampled_peer_seeds_on_its_generators_device(target, monkeypatch):
    """At T > 0 generate() samples from the global RNG, seeded by one draw from the run's
    generator, made on that generator's device (on CUDA the generator lives on the GPU and a
    draw into a CPU tensor raises): same seed, same tokens."""
    from bench.decode.loop import generate
    from groundfloor.clock import Clock
    from groundfloor.sampling import SamplingParams

    pld, p = peer(PLD, make_ctx(target, 4)), prompts(1, seed=5)[0]
    seen = []
    real = torch.randint

    def spy(*a, generator=None, device=None, **kw):
        if generator is not None:
            seen.append((str(device), str(generator.device)))
        return real(*a, generator=generator, device=device, **kw)

    monkeypatch.setattr(torch, "randint", spy)

    def tokens(seed):
        g = torch.Generator().manual_seed(seed)
        return generate(pld, p, 16, SamplingParams(1.0), set(), Clock(torch.device("cpu")), g)

    assert tokens(3).output_ids == tokens(3).output_ids
    assert seen and all(d == g for d, g in seen)


def test_hf_assisted_with_hf_draft(target, tiny_draft_dir):
    ctx = make_ctx(target, 3)
    ar, asst = method("ar", ctx), peer(ASSISTED, ctx, model=str(tiny_draft_dir))
    for p in prompts(4, seed=7):
        base, res = run(ar, p), run(asst, p)
        assert res.output_ids == base.output_ids
        assert res.times_ns["draft"] > 0  # the assistant's forwards are the draft phase
        assert res.drafted_tokens > 0 and res.drafted_tokens >= res.accepted_tokens
        assert max(len(res.drafted_per_pos), 0) <= 3  # constant schedule: k = 3 per round
    assert asst.static_bytes() > 0


def test_peers_stop_at_eos_and_budget(target):
    ctx = make_ctx(target, 4)
    ar, pld = method("ar", ctx), peer(PLD, ctx)
    p = prompts(1, seed=3)[0]
    full = run(ar, p, n=30)
    eos = full.output_ids[10]
    a, b = run(ar, p, n=30, eos={eos}), run(pld, p, n=30, eos={eos})
    assert a.output_ids == b.output_ids and a.stop == b.stop == "eos"
    for n in (1, 2, 7):
        assert len(run(pld, p, n=n).output_ids) == n


def test_distilled_draft_as_transformers_model(tmp_path):
    """Our distilled format rebuilt as a LlamaForCausalLM gives the draft's own logits at its
    vocabulary's target ids and −inf elsewhere."""
    from drafters import draftmodel

    tgt = tiny_llama(0)
    d2t = torch.tensor([5, 9, 2, 40, 77, 100, 3, 60])
    draft = draftmodel.from_target(tgt, 1, d2t)
    draftmodel.save(draft, tmp_path, "tiny", dtype=torch.float32)
    loaded = draftmodel.load(tmp_path, tgt, torch.float32)
    hf = draftmodel.to_transformers(tmp_path, tgt)
    assert hf.model.embed_tokens.weight.data_ptr() == tgt.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([[4, 8, 15, 16, 23, 42]])
    with torch.no_grad():
        ours = loaded(ids, use_cache=False).logits[0]  # (n, V_d)
        full = hf(ids).logits[0]  # (n, V)
    torch.testing.assert_close(full[:, d2t], ours)
    rest = torch.ones(full.shape[-1], dtype=torch.bool)
    rest[d2t] = False
    assert torch.isinf(full[:, rest]).all()


def test_hf_assisted_with_distilled_draft(tmp_path, target):
    from drafters import draftmodel

    d2t = torch.arange(4, 68)
    draftmodel.save(
        draftmodel.from_target(target.model, 1, d2t), tmp_path, "tiny", dtype=torch.float32
    )
    ctx = make_ctx(target, 4)
    ar, asst = method("ar", ctx), peer(ASSISTED, ctx, model=str(tmp_path))
    accepted = 0
    for p in prompts(4, seed=11):
        base, res = run(ar, p), run(asst, p)
        assert res.output_ids == base.output_ids
        accepted += res.accepted_tokens
    assert accepted > 0  # the target's own first layer guesses some tokens right


def test_peers_refuse_lean(tiny_target_dir, tmp_path):
    from helpers import bench, tiny_args

    for m in ("hf_pld", "hf_assisted"):
        p = bench(f"method={m}", "engine=lean", *tiny_args(tiny_target_dir, tmp_path / m))
        assert p.returncode == 2
        last = p.stderr.strip().splitlines()[-1]
        assert last == (
            f"error: method={m} runs transformers' generate() and needs engine=hf "
            f"(the transformers model); engine=lean has none"
        ), p.stderr


def test_peer_runs_beside_ours_on_cli(tiny_target_dir, tmp_path):
    """engine=auto picks hf for the peer, and the run writes the usual outputs."""
    import json

    import pandas as pd
    from helpers import bench, tiny_args

    out = tmp_path / "pld"
    p = bench("method=hf_pld", *tiny_args(tiny_target_dir, out, "repeats=1"))
    assert p.returncode == 0, p.stderr
    s = pd.read_csv(out / "summary.csv")
    assert s.method.iloc[0] == "hf_pld" and s.engine.iloc[0] == "hf"
    assert s.exact_match.iloc[0] == 1.0 and s.tau.iloc[0] >= 1.0
    env = json.loads((out / "env.json").read_text())
    assert env["engine_choice"]["engine_reason"] == "auto: method=hf_pld runs on engine=hf"


def test_transformers_modes_are_measured_against_transformers_plain_generate(
    tiny_target_dir, tmp_path
):
    """hf_pld's baseline is hf_ar: transformers' own plain generate() under the same hooks and
    clock, not our loop; every other method's stays ar."""
    from conftest import compose

    from bench.run.runner import execute

    args = [
        "model=hf",
        f"model.target={tiny_target_dir}",
        "model.dtype=float32",
        "device=cpu",
        "task=code",
        "limit=2",
        "max_new_tokens=16",
        "repeats=1",
        "warmup=0",
        "remeasure=0",
    ]
    summary, path, _ = execute(compose(["method=hf_pld", *args, f"out={tmp_path}"]), tmp_path)
    recs = pd.read_json(path, lines=True)
    base = recs[recs.role == "baseline"]
    assert set(base.method_run) == {"hf_ar"} and (base.target_forwards == base.new_tokens).all()
    assert summary.exact_match.iloc[0] == 1.0  # the same tokens as plain generate()
    other = tmp_path / "ngram"
    _, path, _ = execute(compose(["method=ngram", *args, f"out={other}"]), other)
    assert set(pd.read_json(path, lines=True).query("role == 'baseline'").method_run) == {"ar"}
