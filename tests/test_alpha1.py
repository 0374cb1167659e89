"""alpha1_forced (bench.run.forced): a learned drafter's first-token acceptance from an untimed
pass in which every round drafts one token, beside the timed turns, which it leaves as they
were; and k=auto's state at each repeat's start, the one repeat 0 started from."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import compose
from helpers import DRAFTERS, as_data, engine_of, make_ctx, prompts, run, run_args, tiny_knobs
from omegaconf import OmegaConf

from bench.outputs import records as rec
from bench.outputs.metrics import summarize
from bench.run import forced
from bench.run.runner import Runner
from methods.registry import method_config

pytestmark = pytest.mark.usefixtures("one_thread")


def draft_cell(tiny_target_dir, draft_dir, out, *extra):
    args = run_args(tiny_target_dir, out, f"model.draft={draft_dir}", "method=draft", *extra)
    return compose(args)


def method_records(path) -> list[dict]:
    return [r for r in rec.read_rows(path) if r["role"] == "method"]


def test_the_forced_pass_drafts_every_round_and_repeats_start_alike(
    tiny_target_dir, near_draft_dir, tmp_path
):
    """k=auto's draft model, two repeats, greedy: each prompt's first turn carries the forced
    pass's counts, in which every round drafted one token (so drafted + accepted are the turn's
    tokens after the first, the last round perhaps cut by the budget), and every repeat of a
    turn started from the k=auto state repeat 0 started from."""
    cfg = draft_cell(tiny_target_dir, near_draft_dir, tmp_path, "k=auto", "repeats=2")
    runner = Runner(cfg, tmp_path)
    starts, timed = [], []
    enter, prepare = runner.method.policy.enter, runner.prepare

    def spy_enter(key):  # the state each turn starts from, after any restore
        enter(key)
        starts.append((key, as_data(runner.method.policy.state())))

    def spy_prepare():
        prepare()
        timed.append(len(starts))  # the measured turns' starts come after this

    runner.method.policy.enter, runner.prepare = spy_enter, spy_prepare
    path = runner.run()
    recs = method_records(path)
    first = [r for r in recs if r["turn"] == 0]
    assert first and all(r["alpha1_drafted"] > 0 for r in first)
    for r in first:
        new = r["new_tokens"]  # T = 0: the forced pass emitted the same tokens
        assert new - 1 <= r["alpha1_drafted"] + r["alpha1_accepted"] <= new
    assert all("alpha1_drafted" not in r for r in recs if r["turn"] > 0)
    by_key: dict = {}
    for key, state in starts[timed[0] :]:
        by_key.setdefault(key, []).append(state)
    assert len(by_key) == len([r for r in recs if r["repeat"] == 0])  # one key a timed turn
    for states in by_key.values():
        assert len(states) == 2 and states[1] == states[0]  # repeat 1 starts as repeat 0 did
    assert len({json.dumps(s[0], sort_keys=True) for s in by_key.values()}) > 1  # it learns
    row = summarize(rec.load(path)).iloc[0]
    n = sum(r["alpha1_drafted"] for r in first if r["repeat"] == 0)
    assert row.alpha1_forced_n == n > 0
    assert row.alpha1_forced_ci_low <= row.alpha1_forced <= row.alpha1_forced_ci_high


def test_the_timed_turns_are_the_same_with_and_without_the_pass(
    tiny_target_dir, near_draft_dir, tmp_path
):
    """At T = 1 with a fixed k, a turn's samples depend only on its seed and the method's
    state: the forced pass (its own instance, its own generator) leaves them as they were."""
    outs, paths = {}, {}
    for name, extra in (("with", []), ("without", ["method.alpha1_forced=null"])):
        cfg = draft_cell(tiny_target_dir, near_draft_dir, tmp_path / name, "k=2",
                         "temperature=1", "top_k=8", "repeats=2", *extra)  # fmt: skip
        paths[name] = Runner(cfg, tmp_path / name).run()
        outs[name] = method_records(paths[name])
    ids = {name: [r["output_ids"] for r in recs] for name, recs in outs.items()}
    assert ids["with"] == ids["without"]
    assert any(r.get("alpha1_drafted") for r in outs["with"])
    assert not any("alpha1_drafted" in r for r in outs["without"])
    assert pd.isna(summarize(rec.load(paths["without"])).alpha1_forced.iloc[0])


@pytest.mark.parametrize("name", DRAFTERS)
def test_each_learned_drafter_drafts_one_token_every_round_in_the_pass(env, name):
    """Its YAML's alpha1_forced knobs over the cell's node (here k=auto, which would leave
    rounds plain or draft more): every round drafts exactly one token."""
    ctx = make_ctx(env[engine_of(name)], "auto")
    ctx.model_cfg = OmegaConf.create({d: str(env[d]) for d in DRAFTERS})
    m = forced.build(method_config(name, tiny_knobs(name)), ctx)
    assert type(m.policy).__name__ in ("FixedChain", "FixedTree")  # nothing adapts
    res = run(m, prompts(1, seed=3)[0], n=24)
    assert res.round_depth and set(res.round_depth) == {1}
    assert res.drafted_tokens == len(res.round_depth) == res.target_forwards - 1


@pytest.mark.parametrize("name", ["ngram", "suffix", "recycling", "ar"])
def test_a_method_without_a_learned_drafter_has_no_pass(env, name):
    assert forced.build(method_config(name), make_ctx(env["lean"], "auto")) is None
