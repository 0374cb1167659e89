"""At temperature 0 every method reproduces the autoregressive baseline token for token."""

from __future__ import annotations

import pytest
from conftest import tiny_llama
from helpers import build, engine_of, make_ctx, method, prompts, run, tiny_knobs

from methods.registry import method_names

BASELINES = ("ar", "hf_ar")  # they draft nothing: what every other method is checked against
# a GPU-like cost curve (a verify's extra rows nearly free): k=auto's sizing drafts on it. On the
# tiny model's own provisional curve a random EAGLE head's trees never pay, and every round,
# even forced (force_drafting lifts the plain-round switch, not the sizing), drafts no node.
FLAT = {1: 0.010, 2: 0.010, 4: 0.010, 8: 0.0102, 16: 0.0105, 64: 0.012}


@pytest.mark.parametrize("name", method_names())
def test_every_method_reproduces_its_baseline(env, name):
    """Every method of conf/method/, with its YAML's tiny-model knobs and conftest's random
    drafters, greedy: token for token the plain baseline of its engine (`ar`; `hf_ar` for
    transformers' generate() peers). A new method is covered by its file and its YAML alone.
    Every method but the baselines must draft here (k=auto on a curve where drafting pays, its
    plain-round switch forced off as the run's own cost measure does): a method that never
    drafts reproduces its baseline trivially."""
    base = build(env, "hf_ar" if engine_of(name) == "hf" else "ar", {})
    m = build(env, name, tiny_knobs(name))
    m.calibrate(FLAT)
    m.force_drafting(True)
    drafted = 0
    for p in prompts(3, seed=7):
        res = run(m, p, n=24)
        assert res.output_ids == run(base, p, n=24).output_ids
        drafted += res.drafted_tokens
    assert (drafted > 0) == (name not in BASELINES), f"{name} drafted {drafted} tokens"


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_ngram_reproduces_ar(target, k):
    ctx = make_ctx(target, k)
    ar, ng = method("ar", ctx), method("ngram", ctx)
    drafted = 0
    for p in prompts(12, seed=k):
        base, res = run(ar, p), run(ng, p)
        assert res.output_ids == base.output_ids
        assert sum(res.accept_lengths) == len(res.output_ids)
        drafted += res.drafted_tokens
    assert drafted > 0  # lookup found matches, so accept/reject paths were exercised


@pytest.mark.parametrize("k", [1, 3, 6])
def test_draft_model_reproduces_ar(target, tiny_draft_dir, near_draft_dir, k):
    ctx = make_ctx(target, k)
    ar = method("ar", ctx)
    # a random draft (another shape: 1 layer) accepts almost nothing: exactness only
    dr = method("draft", ctx, model=str(tiny_draft_dir))
    for p in prompts(4, seed=10 + k):
        assert run(dr, p).output_ids == run(ar, p).output_ids
    # a near draft accepts about two thirds: every proposal must be what the draft model decodes
    # greedily from a fresh prefill of the committed tokens (a stale or wrongly cropped draft
    # cache after a part-way rejection changes them), and output stays exact
    dr = method("draft", ctx, model=str(near_draft_dir))
    own = method("ar", make_ctx(dr.model))
    proposals = []
    orig = dr.draft

    def draft(state):
        prop = orig(state)
        proposals.append((state.tokens[: state.length].tolist(), prop.tokens.tolist()))
        return prop

    dr.draft = draft
    accepted = drafted = partial = 0
    for p in prompts(6, seed=10 + k):
        base, res = run(ar, p), run(dr, p)
        assert res.output_ids == base.output_ids
        accepted, drafted = accepted + res.accepted_tokens, drafted + res.drafted_tokens
        partial += sum(1 for a in res.round_accepted[:-1] if 0 < a < k)
    for prefix, tokens in proposals:
        assert run(own, prefix, n=k).output_ids == tokens
    assert drafted > accepted >= drafted / 3  # accepted from below, rejected too
    assert k == 1 or partial > 0  # rejections part-way down a chain


def test_perfect_draft_accepts_everything(target, tmp_path):
    tiny_llama(0).save_pretrained(tmp_path)  # the target as its own draft: all accepted
    ctx = make_ctx(target, 4)
    ar, dr = method("ar", ctx), method("draft", ctx, model=str(tmp_path))
    p = prompts(1, seed=99)[0]
    base, res = run(ar, p, n=41), run(dr, p, n=41)
    assert res.output_ids == base.output_ids
    assert res.accepted_tokens == res.drafted_tokens
    assert res.accept_lengths == [1] + [5] * 8  # prefill token, then k + bonus per round
    assert res.target_forwards == 9 and base.target_forwards == 41


def test_stops_at_eos_and_budget(target):
    ctx = make_ctx(target, 4)
    ar, ng = method("ar", ctx), method("ngram", ctx)
    p = prompts(1, seed=3)[0]
    full = run(ar, p, n=30)
    eos = full.output_ids[10]
    a, b = run(ar, p, n=30, eos={eos}), run(ng, p, n=30, eos={eos})
    cut = full.output_ids.index(eos) + 1
    assert a.output_ids == b.output_ids == full.output_ids[:cut]
    assert a.stop == b.stop == "eos"
    for n in (1, 2, 7):
        res = run(ng, p, n=n)
        assert len(res.output_ids) == n and res.stop == "budget"


def test_ar_tau_is_one(target):
    res = run(method("ar", make_ctx(target)), prompts(1)[0], n=20)
    assert res.target_forwards == len(res.output_ids) == 20
