"""k=auto (methods.auto): the per-round draft size from the cost curve and running rates, exact
at T = 0 for every method that has it, lossless at T = 1, and recorded per round."""

from __future__ import annotations

import json

import pytest
from conftest import compose, tiny_llama
from helpers import as_data, eagle_method, make_ctx, method, prompts, run, run_args, save_head

from bench.decode import turn
from bench.run.runner import execute
from methods import auto

CPU = {1: 0.010, 2: 0.0116, 4: 0.0139, 8: 0.0218, 16: 0.0377, 64: 0.142}  # a 2-core curve
FLAT = {1: 0.010, 2: 0.010, 4: 0.010, 8: 0.0102, 16: 0.0105, 64: 0.012}  # a GPU's


def chooser(curve, alpha, max_k=16, steps=0, step_s=0.0, round_s=0.0):
    ch = auto.Chooser(max_k, steps, prior=alpha)
    ch.calibrate(curve, step_s, round_s)
    return ch


def test_costs_interpolate_between_and_past_the_timed_sizes():
    c = auto.Costs(CPU)
    assert c.verify(1) == pytest.approx(0.010)
    assert c.verify(3) == pytest.approx((0.0116 + 0.0139) / 2)
    assert c.verify(32) == pytest.approx(0.0377 + (0.142 - 0.0377) * 16 / 48)
    assert c.verify(80) > c.verify(64)
    assert c.round(4, 4) == pytest.approx(c.verify(5))
    assert auto.Costs(CPU, step_s=0.002, round_s=0.001).round(4, 4) == pytest.approx(
        c.verify(5) + 4 * 0.002 + 0.001
    )


def test_the_loops_verifies_rescale_what_extra_rows_cost():
    """Costs.observe: the loop's plain verifies set a level, wider ones fit verify_scale (what
    their rows cost over that level ÷ what the curve says), which prices every size's rows, so
    a curve timed on back-to-back forwards that under-prices a round's verify is corrected by
    the rounds themselves; unmeasured verifies (None) change nothing."""
    c = auto.Costs(CPU, step_s=0.001)
    rows = c.verify(4) - c.verify(1)
    before = c.round(3, 2)
    c.observe(4, 0.020)  # no plain verify measured yet: nothing to compare with
    c.observe(1, None)
    assert c.verify_scale == 1.0 and c.plain_verify is None
    for _ in range(60):
        c.observe(1, 0.010)
        c.observe(4, 0.010 + 2 * rows)  # the loop's 3 extra rows cost twice the curve's
    assert c.plain_verify == pytest.approx(0.010)
    assert c.verify_scale == pytest.approx(2.0, rel=0.01)
    assert c.round(3, 2) == pytest.approx(before + rows, rel=0.01)
    assert c.round(0, 0) == pytest.approx(0.010)  # a plain round's price is the curve's
    for _ in range(60):  # noise as large as the rows' cost averages out, not clipped away
        c.observe(4, 0.010 - 1 * rows)
        c.observe(4, 0.010 + 5 * rows)
    assert c.verify_scale == pytest.approx(2.0, rel=0.1)  # the last round weighs most
    for _ in range(60):
        c.observe(2, 0.009)  # below the plain level: clipped, never a negative price
    assert c.verify_scale == pytest.approx(auto.costs.SCALE_MIN, rel=0.01)


def test_a_host_that_runs_faster_than_the_curve_moves_the_whole_curve():
    """Costs.level: the loop's plain verifies 20% under the curve's c(1) (the host sped up after
    the curve was anchored) price a plain round at what they measured and every size's rows
    20% lower too; wider verifies measured at that speed then leave the rows' scale at 1."""
    c = auto.Costs(CPU, step_s=0.001)
    rows = c.verify(4) - c.verify(1)
    assert c.level() == 1.0  # nothing measured yet: the curve as anchored
    for _ in range(80):
        c.observe(1, 0.008)
    assert c.level() == pytest.approx(0.8)
    assert c.round(0, 0) == pytest.approx(0.008)
    assert c.round(3, 2) == pytest.approx(0.008 + 0.8 * rows + 2 * 0.001)
    for _ in range(60):
        c.observe(4, 0.008 + 0.8 * rows)
    assert c.verify_scale == pytest.approx(1.0)
    assert c.round(3, 2) == pytest.approx(0.008 + 0.8 * rows + 2 * 0.001)


def test_the_length_follows_acceptance_and_the_curve():
    # nothing accepted: drafting never pays, a round is a plain step
    assert chooser(CPU, 0.02).length() == 0
    # acceptance high: longer drafts pay, more so on a flat curve than on a steep one
    k_cpu, k_flat = chooser(CPU, 0.9).length(), chooser(FLAT, 0.9).length()
    assert 2 <= k_cpu < k_flat
    assert k_flat == 16  # flat curve, 0.9 per token: the longest allowed
    # the same acceptance, a drafter that costs half a decode step per token: shorter or none
    assert chooser(CPU, 0.6, steps=1, step_s=0.005).length() < chooser(CPU, 0.6).length()
    # the cap: no more tokens than the lookup found
    assert chooser(FLAT, 0.9).length(cap=3) == 3


def test_the_choice_is_the_argmax_of_expected_tokens_per_second():
    alphas = [0.8, 0.7, 0.5, 0.3, 0.1, 0.1]
    costs = auto.Costs(CPU, step_s=0.001)
    rates = [auto.expected(alphas, k) / costs.round(k, k) for k in range(len(alphas) + 1)]
    assert auto.best_chain(alphas, costs, len(alphas), 1) == rates.index(max(rates))
    assert auto.expected(alphas, 2) == pytest.approx(1 + 0.8 + 0.8 * 0.7)


def test_depth_rates_are_conditional_and_kept_per_bucket():
    d = auto.Depths(4, prior=0.5)
    for _ in range(200):  # matches of length 3: the first two accepted, the third rejected
        d.record(3, drafted=4, accepted=2)
    for _ in range(200):  # matches of length 1: the first rejected
        d.record(1, drafted=4, accepted=0)
    a3, a1 = d.alphas(3), d.alphas(1)
    assert a3[0] > 0.95 and a3[1] > 0.95 and a3[2] < 0.05
    assert a3[3] == pytest.approx(d.alphas()[3], abs=1e-9)  # depth 4 never reached: pooled
    assert a1[0] < 0.05
    # a bucket with no rounds reads the pooled rates
    assert d.alphas(7) == pytest.approx(d.alphas())


def test_rates_follow_the_recent_rounds():
    d = auto.Depths(2, prior=0.5)
    for _ in range(300):
        d.record(None, drafted=2, accepted=2)
    assert d.alphas()[0] > 0.95
    for _ in range(150):  # the text changed: nothing is accepted any more
        d.record(None, drafted=2, accepted=0)
    assert d.alphas()[0] < 0.1


def test_a_learned_tree_drafter_skips_rounds_that_do_not_pay():
    g = auto.Gain()
    assert not g.skip()  # optimistic at first: it drafts
    costs = auto.Costs(CPU, step_s=0.004)

    def round_(n, steps, accepted):
        g.note(n, steps, costs)
        g.realized(accepted)

    for _ in range(20):  # rounds that verify 2 nodes after 3 steps and yield nothing drafted
        round_(2, 3, 0)
    assert g.gain < 1
    plain = [g.skip() for _ in range(auto.PROBE_EVERY + 1)]
    assert plain[: auto.PROBE_EVERY] == [True] * auto.PROBE_EVERY
    assert plain[auto.PROBE_EVERY] is False  # a probe drafts, and measures again
    round_(1, 1, 0)  # the probe did not pay: the next one waits twice as long
    plain = [g.skip() for _ in range(2 * auto.PROBE_EVERY + 1)]
    assert plain == [True] * (2 * auto.PROBE_EVERY) + [False]
    before = g.gain
    round_(3, 1, 3)  # this probe pays: its gain moves the stale mean PROBE_PULL of the way
    paid = 4 / costs.round(3, 1) * costs.round(0, 0)
    assert g.gain == pytest.approx(before + auto.tree.PROBE_PULL * (paid - before))
    assert g.gain > 1
    assert not g.skip()
    g.realized(3)  # a plain round (nothing noted) leaves the mean alone
    assert g.gain == pytest.approx(before + auto.tree.PROBE_PULL * (paid - before))


def test_one_rejected_round_does_not_switch_a_paying_drafter_off():
    """The running gain is a mean over about twenty drafted rounds: a drafter whose rounds pay
    on average (every third accepted, each a 1-node round that costs 1.25 plain ones) keeps
    drafting through runs of three rejections, which a mean over five rounds did not."""
    g = auto.Gain()
    costs = auto.Costs({1: 1.0, 2: 1.25})
    for i in range(60):
        assert not g.skip(), f"round {i} was plain at gain {g.gain:.3f}"
        g.note(1, 0, costs)
        g.realized(1 if i % 3 == 2 else 0)
    assert 1.0 < g.gain < 1.2


def test_a_paying_drafter_still_measures_a_plain_round_now_and_then():
    """Gain: while a drafter pays, one round in REFERENCE_EVERY is plain (where the loop times
    rounds), so drafted rounds are judged against what a plain round costs now. Here the model
    prices a plain round at 10 ms, the loop's take 7.5 ms, and a drafted round 10.4 ms for 1.3
    tokens: 1.25x by the model, 0.94x by the clock. Without reference rounds it drafted every
    round; with them it drafts a minority. Untimed rounds (a GPU's) get none."""
    costs = auto.Costs({1: 0.010, 2: 0.012})
    g, plain = auto.Gain(), []
    for i in range(300):
        plain.append(g.skip())
        if plain[-1]:
            g.realized(0, 0.0075)
        else:
            g.note(1, 0, costs)
            g.realized(1 if i % 10 < 3 else 0, 0.0104)
    every = auto.tree.REFERENCE_EVERY
    assert plain[: every + 1] == [False] * every + [True]  # the first reference round
    assert sum(plain[100:]) > 100
    untimed = auto.Gain()
    for i in range(100):  # half its rounds accepted: it pays by the model, and is never plain
        assert not untimed.skip()
        untimed.note(1, 0, costs)
        untimed.realized(i % 2)


def test_a_trained_drafters_depth_is_the_chain_the_rule_picks_on_the_runs_costs():
    """rule_depth: with its held-out acceptance by depth, a drafter whose verify rows and steps
    are cheap (a GPU's flat curve) may draft deep; where each extra row and step costs a tenth
    of a step or more and the head accepts a third of its first tokens, one depth."""
    prior = [0.35, 0.27, 0.25, 0.24]
    flat = auto.Costs({1: 1.0, 2: 1.01, 4: 1.03, 8: 1.06, 16: 1.12}, step_s=0.03)
    steep = auto.Costs({1: 1.0, 2: 1.08, 4: 1.18, 8: 1.45}, step_s=0.14)
    assert auto.rule_depth(prior, steep, 10) == 1
    deep = auto.rule_depth(prior, flat, 10)
    assert deep > 1
    # a better head goes deeper on the same costs, never past max_depth
    assert auto.rule_depth([0.8] * 4, flat, 10) > deep
    assert auto.rule_depth([0.99], flat, 3) == 3
    # never below one depth: the round-by-round choice still decides whether to draft
    assert auto.rule_depth([0.01], steep, 10) == 1
    # the TreeChooser caps its depth with it when calibrated, and only with a prior
    tc = auto.TreeChooser(63, 10, prior)
    tc.calibrate({1: 1.0, 2: 1.08, 4: 1.18, 8: 1.45}, step_s=0.14)
    assert tc.depth == 1 and tc.summary()["limits"]["rule_depth"] == 1
    free = auto.TreeChooser(63, 10)
    free.calibrate({1: 1.0, 2: 1.08, 4: 1.18, 8: 1.45}, step_s=0.14)
    assert free.depth == 10


def test_the_skip_reads_realized_tokens_not_the_estimates():
    """A drafter whose estimates promise much but whose rounds yield nothing switches off."""
    tc = auto.TreeChooser(max_nodes=8, max_depth=4)
    tc.calibrate(CPU, step_s=0.003)

    class P:
        plan, tokens = auto.Plan(), []

    class A:
        n_draft_accepted = 0

    for _ in range(15):
        assert tc.size([0.95, 0.9, 0.85, 0.8], 2) > 0  # the estimates say: verify a tree
        tc.note(4, 2)
        tc.learn(P(), A())
    assert tc.gains.gain < 1 and tc.skip()


def test_a_run_of_plain_rounds_probes_again_ever_less_often():
    ch = chooser(CPU, 0.02)
    ks = []
    for _ in range(200):
        ks.append(ch.length())
        ch.record(None, ks[-1], 0)
    assert ks[: auto.PROBE_EVERY] == [0] * auto.PROBE_EVERY
    probes = [i for i, k in enumerate(ks) if k]
    waits = [b - a - 1 for a, b in zip([-1] + probes, probes)]
    e, m = auto.PROBE_EVERY, auto.PROBE_MAX
    assert waits[:4] == [e, 2 * e, min(4 * e, m), min(8 * e, m)]  # each failed probe doubles it
    assert max(waits) == m


def test_a_round_that_drafts_on_its_merits_resets_the_probe_wait():
    p = auto.Probes()
    for _ in range(3):  # three failed probes: the wait has grown
        while not p.due():
            p.plain()
        p.drafted(merit=False)
    assert p.wait == min(8 * auto.PROBE_EVERY, auto.PROBE_MAX)
    p.drafted(merit=True)
    assert p.wait == auto.PROBE_EVERY


def test_draft_costs_read_the_steady_rounds():
    from bench.decode.turn import TurnResult

    ms = 1_000_000
    # a learned drafter: round 0 catches up on the prompt, round 3 on two plain rounds
    learned = TurnResult(
        [],
        10,
        {"draft": 60 * ms},
        6,
        round_steps=[2, 2, 0, 0, 2],
        draft_steps=6,
        round_draft_ns=[40 * ms, 4 * ms, 0, 0, 12 * ms],
    )
    step, per_round = turn.draft_costs([learned])
    assert step == pytest.approx(0.002) and per_round == 0.0  # 4 ms over round 1's 2 steps
    lookup = TurnResult(
        [], 10, {"draft": 9 * ms}, 4, round_steps=[0, 0, 0], round_draft_ns=[1 * ms, 2 * ms, 3 * ms]
    )
    assert turn.draft_costs([lookup]) == (0.0, pytest.approx(0.002))
    whole = TurnResult([], 10, {"draft": 8 * ms}, 5, draft_steps=4)  # no per-round times
    assert turn.draft_costs([whole]) == (pytest.approx(0.002), 0.0)
    # no steady round (each drafted round follows plain ones): those rounds, their catch-up
    # included, never the turn's totals with the prompt's catch-up (40 ms over 1 step)
    sparse = TurnResult(
        [],
        10,
        {"draft": 70 * ms},
        7,
        round_steps=[1, 0, 0, 1, 0, 1],
        draft_steps=3,
        round_draft_ns=[40 * ms, 0, 0, 3 * ms, 0, 5 * ms],
    )
    assert turn.draft_costs([sparse]) == (pytest.approx(0.004), 0.0)
    # one steady round that paid a one-off cost (40 ms) does not set the step's rate
    spike = TurnResult(
        [],
        10,
        {"draft": 60 * ms},
        6,
        round_steps=[1, 1, 1, 1, 1],
        draft_steps=5,
        round_draft_ns=[9 * ms, 1 * ms, 40 * ms, 1 * ms, 1 * ms],
    )
    assert turn.draft_costs([spike]) == (pytest.approx(0.001), 0.0)


def test_a_turn_records_each_rounds_drafting_time(target, tmp_path):
    save_head(target, "eagle", tmp_path, seed=1)
    m = eagle_method(target, "eagle", tmp_path, k=2)
    res = run(m, prompts(1, seed=3)[0])
    assert len(res.round_draft_ns) == len(res.round_steps) == len(res.round_k) > 1
    assert sum(res.round_steps) == res.draft_steps
    assert 0 < sum(res.round_draft_ns) < res.times_ns["draft"]  # the head's prefill is apart


def test_confidence_stops_a_draft_that_cannot_pay():
    ch = chooser(CPU, 0.6, steps=1, step_s=0.002)
    # before any data a token's rate is its depth's: the confidence alone stops nothing
    assert ch.keep_going(1.0, 1.0, 0, conf=0.02) == ch.keep_going(1.0, 1.0, 0, conf=0.95)
    for _ in range(300):  # confident tokens are accepted, unsure ones rejected
        ch.conf.record([0.95], accepted=1)
        ch.conf.record([0.02], accepted=0)
    assert ch.keep_going(1.0, 1.0, 0, conf=0.95)
    assert not ch.keep_going(1.0, 1.0, 0, conf=0.02)
    assert not ch.keep_going(1.5, 0.01, 1, conf=0.95)  # the path so far is unlikely: stop
    ch.probing = True  # a probing round drafts its first token whatever the confidence
    assert ch.keep_going(1.0, 1.0, 0, conf=0.02)


def test_the_step_that_read_the_confidence_is_already_paid():
    """keep_going weighs a token against its verify row only: the draft step that gave its
    confidence is spent whatever is decided (as the tree drafters' sizing counts its steps)."""
    ch = chooser(CPU, 0.3, steps=1, step_s=0.004)
    # accepted 30% of the time, a token pays for its row (c(2) - c(1) = 0.16 of c(1))
    assert ch.keep_going(1.0, 1.0, 0, conf=0.5)
    c = ch.costs  # ... but not for a step on top: counted as still to pay, it would stop here
    assert 1.3 / c.round(1, 1) < 1.0 / c.round(0, 0)


def test_a_step_the_confidence_keeps_stopping_is_no_longer_paid():
    """Chooser.go_rate: a chain drafter whose paid first step drafts nothing most of the time
    (its confidence stops it) plans with α₁ times how often the step goes, so rounds stop
    paying the step (length 0, a plain round) where it rarely yields a token, and keep drafting
    where it does; probing rounds (forced through) do not count."""
    from types import SimpleNamespace as NS

    stopped = NS(steps=1, plan=auto.Plan(confs=[])), NS(drafted=0, n_draft_accepted=0)
    went = NS(steps=1, plan=auto.Plan(confs=[0.9])), NS(drafted=1, n_draft_accepted=1)
    ch = chooser(CPU, 0.6, max_k=4, steps=1, step_s=0.001)
    assert ch.go_rate() == 1.0 and ch.length() >= 1  # a new run's steps go
    for _ in range(20):
        ch.learn(*stopped)
    assert ch.depths.alphas()[0] == pytest.approx(0.6)  # no token drafted: α₁ as it was
    assert ch.go_rate() < 0.15
    ch.probes = auto.Probes()  # (20 plain rounds would make this round a probe)
    assert ch.length() == 0 and not ch.probing  # the step is not paid on its merits
    stepped = ch.stepped
    ch.probing = True  # a probe's step is forced through: it says nothing about the stop
    ch.learn(NS(steps=1, plan=auto.Plan(confs=[0.1])), NS(drafted=1, n_draft_accepted=0))
    assert ch.stepped == stepped
    ok = chooser(CPU, 0.6, max_k=4, steps=1, step_s=0.001)
    for _ in range(20):
        ok.learn(*went)
    assert ok.go_rate() == 1.0 and ok.length() >= 1
    lookup = chooser(CPU, 0.6, max_k=4, steps=0)  # no step to pay: nothing counted
    lookup.learn(*stopped)
    assert lookup.stepped == 0 and lookup.go_rate() == 1.0


def test_tree_size_reads_the_scores_and_calibration():
    t = auto.TreeChooser(63, 10)
    t.calibrate(CPU)
    assert t.size([0.01] * 20, 0) == 0
    n = t.size([0.9, 0.8, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02], 0)
    assert 2 <= n <= 6
    assert t.deeper([0.9, 0.8], [0.7, 0.1], 1)
    assert t.deeper([0.9, 0.8], [0.001, 0.001], 1) == 0
    # the frontier is cut to the nodes whose children could pay: an unlikely tail is not run
    width = t.deeper([0.9, 0.8], [0.7, 0.6, 1e-4, 1e-4, 1e-4, 1e-4], 1)
    assert 1 <= width <= 2
    assert t.deeper([0.9, 0.8], [0.7] * 6, 1) >= width
    # children never rank before their parents, whatever λ says
    est = t.calibrated([0.5, 0.6], [-1, 0], [1, 2])
    assert est[1] <= est[0]


def test_node_rates_prune_a_fixed_tree_to_what_is_accepted():
    parents = [-1, -1, 0, 0, 2]
    nr = auto.NodeRates(parents, 63)
    nr.calibrate(CPU)

    class P:
        plan = auto.Plan(nodes=[0, 1, 2, 3, 4])

    class A:
        seen = ([0, 2, 4], None, None)  # (proposal nodes on the accepted path, …)
        n_draft_accepted = 3

    for _ in range(100):
        nr.learn(P, A)
    keep = nr.choose(steps=0)
    assert keep[:3] == [0, 2, 4] and 1 not in keep and 3 not in keep
    assert auto.subtree(parents, [0, 2, 4]) == [-1, 0, 1]


# --- every method with k=auto reproduces the baseline at T = 0 ------------------------------


@pytest.mark.parametrize("name", ["ngram", "sam", "suffix", "oracle", "recycling"])
def test_lookup_methods_with_auto_reproduce_ar(target, name):
    ctx = make_ctx(target, "auto")
    ar, m = method("ar", ctx), method(name, ctx)
    m.calibrate(CPU)
    chosen = []
    for p in prompts(8, seed=3):
        base, res = run(ar, p), run(m, p)
        assert res.output_ids == base.output_ids
        assert len(res.round_k) == res.target_forwards - 1
        chosen += res.round_k
    assert max(chosen) >= 1  # it drafted somewhere


def test_suffix_tree_with_auto_reproduces_ar(target):
    ctx = make_ctx(target, "auto")
    ar, m = method("ar", ctx), method("suffix", ctx, shape="tree")
    m.calibrate(FLAT)
    for p in prompts(6, seed=4):
        assert run(m, p).output_ids == run(ar, p).output_ids


def test_oracle_with_auto_drafts_long_on_a_flat_curve(target):
    ctx = make_ctx(target, "auto")
    m = method("oracle", ctx)
    m.calibrate(FLAT)
    res = run(m, prompts(1, seed=5)[0], n=60)
    assert max(res.round_k) >= 8  # every draft accepted: the rates climb, so does k


def test_draft_model_with_auto_reproduces_ar_and_switches_off_a_bad_draft(
    target, tiny_draft_dir, near_draft_dir
):
    ctx = make_ctx(target, "auto")
    ar = method("ar", ctx)
    near = method("draft", ctx, model=str(near_draft_dir))
    near.calibrate(CPU, (0.001, 0.0))
    bad = method("draft", ctx, model=str(tiny_draft_dir))
    bad.calibrate(CPU, (0.004, 0.0))
    near_k, bad_k = [], []
    for p in prompts(6, seed=6):
        base = run(ar, p)
        r1, r2 = run(near, p), run(bad, p)
        assert r1.output_ids == base.output_ids == r2.output_ids
        near_k += r1.round_k
        bad_k += r2.round_k
    assert sum(near_k) / len(near_k) > sum(bad_k) / len(bad_k)
    assert bad_k[-10:].count(0) >= 5  # a draft that is never right is switched off


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_eagle_with_auto_reproduces_ar(target, tmp_path, kind):
    save_head(target, kind, tmp_path, seed=1)
    ctx = make_ctx(target, "auto")
    ar = method("ar", ctx)
    m = eagle_method(target, kind, tmp_path, k="auto")
    m.calibrate(FLAT, (0.0005, 0.0))
    sizes = []
    for p in prompts(4, seed=7):
        res = run(m, p)
        assert res.output_ids == run(ar, p).output_ids
        sizes += res.round_k
    assert max(sizes) >= 1


def test_medusa_with_auto_reproduces_ar(target, tmp_path):
    from helpers import random_heads

    from drafters import medusa as heads_io

    heads_io.save(random_heads(target.config.hidden_size, 3, 2), tmp_path, "tiny")
    ctx = make_ctx(target, "auto")
    ar = method("ar", ctx)
    m = method("medusa", ctx, heads=str(tmp_path), tree="medium")
    m.calibrate(CPU, (0.0005, 0.0))
    for p in prompts(4, seed=8):
        res = run(m, p)
        assert res.output_ids == run(ar, p).output_ids
        assert all(k <= m.layout.size for k in res.round_k)


# --- each repeat of a turn starts from the state repeat 0 started from ---------------------


@pytest.mark.parametrize("name", ["ngram", "draft"])
def test_a_repeat_starts_from_the_state_its_first_measurement_started_from(
    target, near_draft_dir, name
):
    """Rates, the drafting switch and the costs' refits are learned from rounds; a turn met
    again (a measurement repeat) starts from the policy as it stood when that turn first
    started, whatever was decoded in between (before: repeat 1 started tuned to its text)."""
    ctx = make_ctx(target, "auto")
    m = method(name, ctx, **({"model": str(near_draft_dir)} if name == "draft" else {}))
    m.calibrate(CPU, (0.001, 0.0))
    p, q = prompts(2, seed=9)
    m.ready(tuple(p))
    first = as_data(m.policy.state())
    run(m, p, n=24)
    run(m, q, n=24)
    learned = as_data(m.policy.state())
    assert learned != first  # two turns moved it
    m.ready(tuple(p))
    assert as_data(m.policy.state()) == first
    m.ready(tuple(q))  # q first started after p's turn: from there, not from now
    assert as_data(m.policy.state()) not in (first, learned)
    m.calibrate(CPU, (0.001, 0.0))  # new costs: the states remembered on the old ones go
    assert not m.policy.snapshots


# --- a run: recorded, summarised, lossless at T = 1 -------------------------------------------


def test_a_run_records_and_summarises_the_chosen_k(tiny_target_dir, tmp_path):
    summary, _, _ = execute(
        compose(["method=ngram", "k=auto", *run_args(tiny_target_dir, tmp_path)]), tmp_path
    )
    recs = [json.loads(line) for line in open(tmp_path / "records.jsonl")]
    method_recs = [r for r in recs if r["role"] == "method"]
    assert all(len(r["round_k"]) == r["target_forwards"] - 1 for r in method_recs)
    row = summary.iloc[0]
    hist = dict(tuple(map(int, kv.split(":"))) for kv in row.k_hist.split())
    assert sum(hist.values()) == sum(len(r["round_k"]) for r in method_recs)
    # the mean and the plain share against hand-computed values: test_metrics.py
    # (test_chosen_k_histogram_mean_and_plain_share); here, that they read these rounds
    assert min(hist) <= row.mean_k <= max(hist) and 0 <= row.plain_rounds <= 1
    assert (row.plain_rounds > 0) == (0 in hist)
    env = json.loads((tmp_path / "env.json").read_text())
    auto = env["method_info"]["policy"]
    assert set(auto) == {"kind", "measured", "limits", "priors", "learned", "constants"}
    assert auto["kind"] == "Chooser"
    assert auto["measured"]["round_ms"] > 0  # the lookup's cost, measured on the warm-up turn
    assert auto["priors"]["alpha"] == [0.5] * 16  # ngram: PRIOR at every depth, assumed
    assert auto["learned"] == auto["priors"]  # calibrated, no round learned from yet
    assert auto["constants"]["PROBE_EVERY"] == 8 and "PROBE_EVERY" not in auto["measured"]
    end = env["method_info"]["policy_end"]  # the policy as the measured turns left it
    assert set(end) == set(auto) and end["measured"] == auto["measured"]
    assert end["learned"] != end["priors"]  # the measured turns' rounds moved it


def test_fixed_k_still_drafts_up_to_k(tiny_target_dir, tmp_path):
    summary, _, _ = execute(
        compose(["method=ngram", "k=3", *run_args(tiny_target_dir, tmp_path)]), tmp_path
    )
    recs = [json.loads(line) for line in open(tmp_path / "records.jsonl")]
    assert max(max(r["round_k"] or [0]) for r in recs if r["role"] == "method") <= 3
    assert str(summary.k.iloc[0]) == "3"


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", ["draft", "suffix"])
def test_auto_keeps_the_law_at_temperature_one(name, tiny_target_dir, cut_draft_dir, tmp_path):
    """A length chosen from earlier rounds' acceptance (and, for the draft model, from its
    confidence before each token is drawn) must not bend the output law: check=distribution."""
    extra = [f"model.draft={cut_draft_dir}"] if name == "draft" else ["method.shape=tree"]
    cfg = compose(
        [
            f"method={name}",
            "k=auto",
            *run_args(tiny_target_dir, tmp_path, *extra),
            "limit=1",
            "max_new_tokens=8",
            "warmup=0",
            "temperature=1",
            "top_k=8",
            "check=distribution",
            "dist_samples=200",
        ]
    )
    summary, _, _ = execute(cfg, tmp_path)
    ev = json.loads((tmp_path / "distcheck.json").read_text())
    assert ev["drafted_tokens"] > 0
    assert summary.dist_pvalue.iloc[0] > 0.01


def test_bad_k_is_one_clear_line(tiny_target_dir, tmp_path):
    from groundfloor.errors import UserError

    with pytest.raises(UserError, match="k='often' is not valid; use an integer >= 1 or auto"):
        execute(
            compose(["method=ngram", "k=often", *run_args(tiny_target_dir, tmp_path)]), tmp_path
        )
    m = tiny_llama(0)
    with pytest.raises(UserError, match="lookahead"):
        method("lookahead", make_ctx(m, "auto"))


@pytest.mark.parametrize("name", ["ngram", "suffix", "eagle"])
def test_constructors_never_time_the_engine(name, target, tmp_path, monkeypatch):
    """k=auto's policy is built by the constructor and calibrated before the first turn
    (Method.ready, untimed) or by the run after its warm-up, never by timing in __init__."""
    from engines import probe

    timed = []
    real = probe.step_costs
    monkeypatch.setattr(probe, "step_costs", lambda *a, **k: timed.append(1) or real(*a, **k))
    monkeypatch.setattr("methods.budget.step_costs", probe.step_costs)
    if name == "eagle":
        save_head(target, "eagle", tmp_path, seed=1)
        m = eagle_method(target, "eagle", tmp_path, k="auto")
    else:
        m = method(name, make_ctx(target, k="auto"))
    assert m.policy.costs is None and not timed
    res = run(m, prompts(1, seed=5)[0], n=12)  # ready() plans with a provisional curve
    assert m.policy.costs is not None and res.output_ids


def test_a_forced_policy_drafts_every_round():
    """While the run measures a drafter's cost per step (Method.force_drafting), a learned
    drafter's plain-round switch is off: every round drafts, so each after the first is a
    steady one (a round after plain ones pays a catch-up, which read as a step priced EAGLE-2's
    steps at ~4× their cost)."""
    from methods.auto.tree import NodeRates, TreeChooser

    for pol in (TreeChooser(8, 4), NodeRates([-1, 0, 1], 4)):
        pol.gains.gain = 0.5  # below a plain round's, its probe not due: it would skip
        assert pol.skip()
        pol.forced = True
        assert not any(pol.skip() for _ in range(40))
        pol.forced = False
        assert pol.skip()


def test_a_tree_policys_summary_keeps_priors_and_constants_apart_from_measurements():
    """env.json once labelled the gain's start (1.1) and λ (1) "measured inputs": they are
    priors, the probe waits and means constants; measured is what the run timed."""
    pol = auto.TreeChooser(63, 10, prior=[0.4, 0.3])
    pol.calibrate(CPU, step_s=0.0005, round_s=0.0001)
    s = pol.summary()
    assert s["measured"] == {"c1_ms": 10.0, "step_ms": 0.5, "round_ms": 0.1, "overhead_ms": 0.0}
    assert s["priors"]["gain"] == 1.1 and s["priors"]["lambda"] == [1.0] * 10
    assert s["priors"]["alpha"][:3] == [0.4, 0.3, 0.3]
    assert s["constants"]["REFERENCE_EVERY"] == 16 and s["constants"]["PROBE_PULL"] == 0.3
    assert s["limits"] == {"max_nodes": 63, "max_depth": 10, "rule_depth": 1}
    pol.gains.realized(0, 0.02)  # a plain round, then a rejected drafted one
    pol.note(4, 1)
    pol.gains.realized(0, 0.02)
    after = pol.summary()
    assert after["learned"]["gain"] < 1.1 and after["priors"]["gain"] == 1.1


def test_a_forced_policy_drafts_where_its_cost_model_would_not():
    """force_drafting (the run's drafter-cost pass, check=distribution) drafts at least one
    token (chain) or node (tree) in every round, even where the rates and costs price drafting
    at a loss and the unforced policy picks 0: a forced check that drafts nothing tests
    nothing."""
    from methods.auto.tree import TreeChooser

    chain = auto.Chooser(8, 1, prior=0.01)
    chain.calibrate(CPU, step_s=0.02)  # a drafter step dearer than a target step
    assert [chain.length() for _ in range(10)] == [0] * 10
    chain.forced = True
    assert [chain.length() for _ in range(10)] == [1] * 10
    tree = TreeChooser(8, 4)
    tree.calibrate(CPU)
    assert tree.size([0.001, 0.0005], 0) == 0
    tree.forced = True
    assert tree.size([0.001, 0.0005], 0) == 1 and tree.size([], 0) == 0
    static = auto.NodeRates([-1, 0, 1], 4, [0.001] * 3)
    static.calibrate(CPU, step_s=0.02)
    assert static.choose(steps=1) == []
    static.forced = True
    assert static.choose(steps=1) == [0]


def test_a_static_tree_starts_from_the_drafters_own_node_rates():
    """Siblings are disjoint events: a prior of PRIOR^depth for each made a fresh template look
    worth verifying whole; a drafter's own per-node reach (Medusa: its heads' rank accuracies
    multiplied along the path) starts the sizing where the heads are."""
    from methods.static_trees import path_reach

    parents = [-1, -1, -1, 0]  # three ranks of the first head, one child of its top token
    own = path_reach([(0,), (1,), (2,), (0, 0)], [[0.3, 0.08, 0.05], [0.5, 0.1]])
    assert own == pytest.approx([0.3, 0.08, 0.05, 0.15])
    assert path_reach([(0,), (3,)], [[0.3, 0.08, 0.05]]) is None  # a rank it has no rate for
    assert path_reach([(0,)], None) is None
    rated, flat = auto.NodeRates(parents, 8, own), auto.NodeRates(parents, 8)
    for pol in (rated, flat):
        pol.calibrate(CPU, step_s=0.0005)
    assert rated.estimates() == pytest.approx(own)
    assert flat.estimates() == pytest.approx([0.5, 0.5, 0.5, 0.25])
    assert rated.choose(steps=1) == [0, 3]  # the top path pays on this curve, its siblings not
    assert flat.choose(steps=1) == [0, 1, 2]  # every sibling at 0.5: all three verified
    with pytest.raises(ValueError, match="1 node priors for 4 nodes"):
        auto.NodeRates(parents, 8, [0.3])
