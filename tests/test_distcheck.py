"""Sampled runs: seeded reproducibility, and `check=distribution` catching a wrong sampler in
every task it draws, saying "untested" where the method drafted too little to test, and
stamping its p-value only on what it sampled.

The tiny random models are close to uniform over their 128 tokens, so the run-level checks use
top_k=8: a few hundred samples then spread over few enough tokens for the chi-square test to have
power. Their draft is the target cut to its first layer, so that drafts are accepted and rejected.
"""

from __future__ import annotations

import dataclasses
import json
import random

import pandas as pd
import pytest
import torch
from conftest import compose
from helpers import make_ctx, method, prompts, tiny_run

from bench.decode.loop import generate
from bench.run.distcheck import END
from bench.run.runner import execute
from groundfloor.clock import Clock
from groundfloor.sampling import SamplingParams
from groundfloor.stats import bonferroni, two_sample_pvalue
from methods.base import Method
from methods.ngram import NGram

pytestmark = pytest.mark.usefixtures("one_thread")  # many small ops: a second thread only waits


# --- the two-sample test itself ---------------------------------------------------------------


def test_two_sample_pvalue_same_and_different():
    rng = random.Random(0)
    tokens, weights = [1, 2, 3, 4, 5, END], [30, 25, 20, 15, 9, 1]
    a = rng.choices(tokens, weights, k=2000)
    b = rng.choices(tokens, weights, k=2000)
    p, bins = two_sample_pvalue(a, b)
    assert p > 0.01 and bins == 6
    shifted = rng.choices(tokens, [20, 35, 20, 15, 9, 1], k=2000)
    assert two_sample_pvalue(a, shifted)[0] < 1e-6


def test_two_sample_pools_rare_tokens():
    a = [0] * 50 + [1] * 50 + list(range(100, 110))  # ten singletons: one pooled bin
    b = [0] * 50 + [1] * 50 + list(range(200, 210))
    p, bins = two_sample_pvalue(a, b)
    assert bins == 3 and p > 0.5  # pooled, the tails look alike (they are both "rare")
    assert two_sample_pvalue([7] * 40, [7] * 40) == (1.0, 1)  # nothing to tell apart
    assert two_sample_pvalue(list(range(40)), list(range(40, 80)))[1] == 1  # all rare → 1 bin
    assert bonferroni([0.2, 0.004, 0.5]) == pytest.approx(0.012)
    assert bonferroni([0.9, 0.5]) == 1.0


def test_two_sample_power():
    """What docs/sampling.md claims for 200 samples per side at the run's 0.01 over 5 tests."""
    rng = random.Random(0)
    base = [0.4, 0.25, 0.15, 0.1, 0.1]

    def caught(shift, trials=300):
        other = [base[0] - shift, base[1] + shift] + base[2:]
        return (
            sum(
                bonferroni(
                    [
                        two_sample_pvalue(
                            rng.choices(range(5), base, k=200), rng.choices(range(5), other, k=200)
                        )[0]
                    ]
                    * 5
                )
                < 0.01
                for _ in range(trials)
            )
            / trials
        )

    assert caught(0.0) <= 0.02
    assert 0.05 <= caught(0.1) <= 0.2
    assert 0.75 <= caught(0.2) <= 0.95


# --- seeded reproducibility -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ngram", "draft"])
def test_same_seed_same_tokens(name, tiny_draft_dir):
    from conftest import tiny_llama

    ctx = make_ctx(tiny_llama(0), 3)
    m = method(name, ctx, **({"model": str(tiny_draft_dir)} if name == "draft" else {}))
    sp = SamplingParams(1.0)
    p = prompts(1, seed=4)[0] * 2  # repeated, so n-gram lookup finds drafts

    def tokens(seed):
        g = torch.Generator().manual_seed(seed)
        res = generate(m, p, 24, sp, set(), Clock(torch.device("cpu")), g)
        assert res.drafted_tokens > 0
        return res.output_ids

    assert tokens(7) == tokens(7) == tokens(7)
    assert tokens(7) != tokens(8)


# --- the run-level check ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ngram", "draft"])
def test_check_distribution_passes_a_lossless_method(
    name, tiny_target_dir, cut_draft_dir, tmp_path
):
    # draft at k=auto (its rounds forced to draft during the check); ngram at a fixed k: on the
    # tiny model's near-uniform text it finds few matches, and k=auto's sizes read timings
    extra = [f"model.draft={cut_draft_dir}"] if name == "draft" else ["k=8"]
    summary, _, runner = execute(
        compose([f"method={name}", *tiny_run(tiny_target_dir, tmp_path, *extra)]), tmp_path
    )
    run_ev = json.loads((tmp_path / "distcheck.json").read_text())
    assert run_ev["samples"] == 200 and run_ev["floor"] == 100 and run_ev["status"] == "tested"
    ev = run_ev["tasks"]["code"]
    assert ev["status"] == "tested" and ev["drafted_tokens"] >= run_ev["floor"]
    assert runner.dist.tasks["code"]["drafted"] == ev["drafted_tokens"] == runner.dist.drafted
    assert [t["test"] for t in ev["tests"]] == [
        "token 1",
        "token 2",
        "prefix 1..2",
        "token 3",
        "prefix 1..3",
        *("after forced rejections: " + t for t in ("token 1", "token 2", "prefix 1..2")),
        *("after forced rejections: " + t for t in ("token 3", "prefix 1..3")),
        *("after forced rejections: " + t for t in ("token 4", "prefix 1..4")),
    ]
    # up to 1..2 there are enough samples to compare (1..3 is spread too thin: pooled, p = 1)
    assert min(t["bins"] for t in ev["tests"][:3]) >= 3
    assert 0 < ev["accepted_tokens"] < ev["drafted_tokens"]  # both accept and reject happened
    assert summary.dist_pvalue.iloc[0] == pytest.approx(ev["dist_pvalue"])
    assert summary.dist_pvalue.iloc[0] == pytest.approx(runner.dist.pvalue)
    assert summary.dist_pvalue.iloc[0] > 0.01 and summary.dist_status.iloc[0] == "tested"
    recs = [json.loads(line) for line in open(tmp_path / "records.jsonl")]
    sampled = [r for r in recs if r["role"] == "method" and r["turn"] == 0]
    stamped = {(r["dist_pvalue"], r["dist_status"]) for r in sampled}
    assert stamped == {(ev["dist_pvalue"], "tested")}
    assert all(r["dist_pvalue"] is None for r in recs if r not in sampled)


def test_check_distribution_catches_argmax_in_every_task(tiny_target_dir, tmp_path, monkeypatch):
    """The SGLang-style bug: the method's verification takes argmax although T > 0. The check
    draws the first prompt of every task of the cell, and each task's own p-value catches it."""

    def argmax_accept(self, state, proposal, logits):
        return Method.accept(
            self, dataclasses.replace(state, sampling=SamplingParams()), proposal, logits
        )

    monkeypatch.setattr(NGram, "accept", argmax_accept)
    two_tasks = ["task=core", "task.include=[code,dialog]"]
    summary, _, runner = execute(
        compose(["method=ngram", "k=8", *tiny_run(tiny_target_dir, tmp_path, *two_tasks)]),
        tmp_path,
    )
    assert set(runner.dist.tasks) == {"code", "dialog"}
    for task, got in runner.dist.tasks.items():
        assert got["status"] == "tested" and got["pvalue"] < 1e-3, task
        row = summary[summary.task == task].iloc[0]
        assert row.dist_status == "tested" and row.dist_pvalue == pytest.approx(got["pvalue"])
    overall = summary[summary.task == "all"].iloc[0]
    assert overall.dist_status == "tested" and overall.dist_pvalue < 1e-3


def test_a_method_that_drafts_nothing_is_untested(tiny_target_dir, tmp_path):
    """`ar` as the method drafts nothing: no task reaches the drafting floor, so no p-value is
    reported anywhere (before, such a check read p = 1), and every row says untested."""
    two_tasks = ["task=core", "task.include=[code,dialog]"]
    summary, _, runner = execute(
        compose(["method=ar", *tiny_run(tiny_target_dir, tmp_path, *two_tasks)]), tmp_path
    )
    d = runner.dist
    assert (d.status, d.pvalue, d.drafted, d.floor) == ("untested", None, 0, 100)
    assert {t: (v["status"], v["pvalue"], v["drafted"]) for t, v in d.tasks.items()} == {
        "code": ("untested", None, 0),
        "dialog": ("untested", None, 0),
    }
    assert set(summary.dist_status) == {"untested"} and summary.dist_pvalue.isna().all()
    ev = json.loads((tmp_path / "distcheck.json").read_text())
    assert ev["status"] == "untested" and ev["dist_pvalue"] is None
    assert {t: e["drafted_tokens"] for t, e in ev["tasks"].items()} == {"code": 0, "dialog": 0}


def test_a_category_the_check_never_sampled_carries_no_pvalue(
    tiny_target_dir, cut_draft_dir, tmp_path
):
    """A question file with two categories is one task: the check draws its first prompt only,
    so the other category's row has no p-value (before, every row carried the run's)."""
    rows = [
        {"question_id": 1, "category": "writing", "turns": ["write code list sum number"]},
        {"question_id": 2, "category": "rag", "turns": ["answer two three four five"]},
    ]
    q = tmp_path / "question.jsonl"
    q.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    args = tiny_run(tiny_target_dir, out, "task=jsonl", f"task.path={q}", "limit=2")
    summary, _, runner = execute(
        compose(["method=draft", f"model.draft={cut_draft_dir}", "k=4", *args]), out
    )
    (task,) = runner.dist.tasks
    assert runner.dist.tasks[task]["status"] == "tested"
    by_cat = summary.set_index("category")
    assert set(by_cat.index) == {"dialog", "rag", "all"}  # Spec-Bench's writing is our dialog
    assert by_cat.loc["dialog"].dist_status == "tested"
    assert by_cat.loc["dialog"].dist_pvalue == pytest.approx(runner.dist.pvalue)
    assert pd.isna(by_cat.loc["rag"].dist_pvalue) and pd.isna(by_cat.loc["rag"].dist_status)
    assert by_cat.loc["all"].dist_pvalue == pytest.approx(runner.dist.pvalue)  # the task's row


def test_check_distribution_catches_a_rollback_bug_from_round_two_on(
    tiny_target_dir, tmp_path, monkeypatch
):
    """A method that, from its second verify round on, reads the verify one row too far (its
    position bookkeeping not rolled back after a rejection): each round it accepts or resamples
    from the logits after the drafted token instead of before it. The forced-rejection draws
    put every position after the first behind such a rollback."""
    real = NGram.accept

    def off_by_one(self, state, proposal, logits):
        state.aux["rounds"] = state.aux.get("rounds", 0) + 1
        if state.aux["rounds"] >= 2 and proposal.tokens.numel():
            logits = torch.cat([logits[1:], logits[-1:]])
        return real(self, state, proposal, logits)

    monkeypatch.setattr(NGram, "accept", off_by_one)
    summary, _, _ = execute(
        compose(["method=ngram", "k=8", *tiny_run(tiny_target_dir, tmp_path, "dist_samples=1500")]),
        tmp_path,
    )
    ev = json.loads((tmp_path / "distcheck.json").read_text())["tasks"]["code"]
    forced = [t["pvalue"] for t in ev["tests"] if t["test"].startswith("after forced")]
    assert min(forced) * len(ev["tests"]) < 1e-3  # the forced-rejection draws see it
    assert summary.dist_pvalue.iloc[0] < 1e-3


def test_check_distribution_seeds_are_reproducible(tiny_target_dir, tmp_path):
    runs = []
    for d in ("a", "b"):
        execute(
            # a fixed k: k=auto's sizes read timings, so its draws (not their law) vary by run
            compose(
                ["method=ngram", "k=8", *tiny_run(tiny_target_dir, tmp_path / d, "dist_samples=30")]
            ),
            tmp_path / d,
        )
        runs.append(json.loads((tmp_path / d / "distcheck.json").read_text())["tasks"]["code"])
    assert runs[0]["counts_per_position"] == runs[1]["counts_per_position"]


def test_two_sample_power_at_the_sample_count_the_planted_bug_tests_use():
    """At 1500 samples per side a 0.1 shift in one token's probability is caught at >= 90%
    power (computed here by simulation: ~0.99 for this base distribution), false alarms stay
    near the 0.01 level."""
    rng = random.Random(1)
    base = [0.4, 0.25, 0.15, 0.1, 0.1]

    def caught(shift, n=1500, trials=200):
        other = [base[0] - shift, base[1] + shift] + base[2:]
        return (
            sum(
                bonferroni(
                    [
                        two_sample_pvalue(
                            rng.choices(range(5), base, k=n), rng.choices(range(5), other, k=n)
                        )[0]
                    ]
                    * 5
                )
                < 0.01
                for _ in range(trials)
            )
            / trials
        )

    assert caught(0.0) <= 0.03
    assert caught(0.1) >= 0.9


def _resample_from_p(p, q):
    """Planted bug: after a rejection, sample from the target's p instead of norm(max(0, p − q))
    (the draft's token keeps too much mass)."""
    return p


@pytest.mark.parametrize(
    "name,module", [("draft", "groundfloor.sampling"), ("medusa", "groundfloor.tree")]
)
def test_check_distribution_catches_a_missing_residual(
    name, module, tiny_target_dir, cut_draft_dir, tmp_path, monkeypatch
):
    """A run-level bug in a chain method (draft, sampled q) and in a tree method (Medusa's
    point-mass siblings): the lossless run passes, the one with the residual planted out fails."""
    import importlib

    if name == "draft":
        extra = [f"model.draft={cut_draft_dir}", "k=4"]  # fixed sizes: the bug's power
    else:
        from helpers import random_heads

        from drafters import medusa as heads_io
        from groundfloor.models import load_model

        tgt, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
        heads_io.save(
            random_heads(tgt.get_output_embeddings().weight.shape[1], 3, 4),
            tmp_path / "heads",
            "tiny",
        )
        extra = [f"method.heads={tmp_path / 'heads'}", "method.tree=medium", "method.k=null"]
    # the forced-rejection draws cannot see this bug (the forced token has p ~ 0): left out
    args = [
        f"method={name}",
        *tiny_run(tiny_target_dir, tmp_path / "ok", *extra),
        "dist_samples=1500",
        "dist_forced=false",
    ]
    summary, _, _ = execute(compose(args), tmp_path / "ok")
    assert summary.dist_pvalue.iloc[0] > 0.01
    monkeypatch.setattr(importlib.import_module(module), "residual", _resample_from_p)
    args = [
        f"method={name}",
        *tiny_run(tiny_target_dir, tmp_path / "bug", *extra),
        "dist_samples=1500",
        "dist_forced=false",
    ]
    summary, _, _ = execute(compose(args), tmp_path / "bug")
    assert summary.dist_pvalue.iloc[0] < 0.01  # the level docs/sampling.md reads p at
    ev = json.loads((tmp_path / "bug" / "distcheck.json").read_text())["tasks"]["code"]
    assert ev["tests"] and not any(t["test"].startswith("after forced") for t in ev["tests"])
