"""Whatever a method does for its drafter is timed as draft: its own prefill, its reading of the
verify; the verified width counts every verified token; the cost curve is timed warm."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from conftest import tiny_llama
from helpers import GREEDY, eagle_method, make_ctx, method, prompts, run, save_head

from bench.decode.loop import generate
from engines import probe
from engines.load import wrap
from groundfloor.clock import Clock
from groundfloor.state import DecodeState
from methods.ngram import NGram

pytestmark = pytest.mark.usefixtures("one_thread")


class WatchedClock(Clock):
    """A clock that knows which phase is open."""

    current = None

    @contextmanager
    def phase(self, name: str):
        self.current = name
        with super().phase(name):
            yield
        self.current = None


class WatchedDrafter(NGram):
    """n-gram noting the open phase whenever its drafter prefill or update runs."""

    def draft_prefill(self, state, logits):
        self.seen.append(("draft_prefill", self.clock.current))

    def observe(self, state, proposal, acc):
        self.seen.append(("observe", self.clock.current))


def test_drafter_prefill_and_updates_run_inside_the_draft_phase(target):
    ctx = make_ctx(target, 3)
    m = WatchedDrafter(method("ngram", ctx).cfg, ctx)
    m.seen, m.clock = [], WatchedClock(torch.device("cpu"))
    res = generate(m, prompts(1, seed=4)[0], 12, GREEDY, set(), m.clock)
    rounds = res.target_forwards - 1
    assert rounds >= 2
    assert m.seen == [("draft_prefill", "draft")] + [("observe", "draft")] * rounds


@pytest.mark.parametrize("name", ["draft", "lookahead", "recycling", "sam", "suffix", "eagle"])
def test_the_target_prefill_builds_no_drafter_state(target, tiny_draft_dir, tmp_path, name):
    """prefill() is the target's forward only: the drafter's prefill (a draft model's forward,
    suffix's and SAM's indexes, lookahead's pool, recycling's table, EAGLE's feature fusion)
    happens in draft_prefill(), timed as draft."""
    ctx = make_ctx(target, 3)
    if name == "eagle":
        m = eagle_method(target, "eagle", save_head(target, "eagle", tmp_path / "head"))
    else:
        m = method(name, ctx, **({"model": str(tiny_draft_dir)} if name == "draft" else {}))
    ids = prompts(1, seed=6)[0]
    cap = len(ids) + 8 + m.max_verify_width()
    state = DecodeState.start(ids, cap, torch.device("cpu"), GREEDY, None, target.new_cache(cap))
    m.start(state)
    before = set(state.aux)
    table = m.adj.clone() if name == "recycling" else None
    with torch.inference_mode():
        logits = m.prefill(state)
    assert set(state.aux) - before <= {"prefill_hidden"}  # EAGLE keeps the target's states
    if name == "draft":
        assert state.aux["draft_cache"].length == 0
    if name == "recycling":
        assert torch.equal(m.adj, table)
    with torch.inference_mode():
        m.draft_prefill(state, logits)
    assert set(state.aux) - before - {"prefill_hidden"} or name in ("draft", "recycling")


def test_lookaheads_verified_width_includes_its_window(target):
    ctx = make_ctx(target)
    la = method("lookahead", ctx)
    res = run(la, prompts(1, seed=2)[0], n=16)
    assert res.verified_tokens > res.drafted_tokens  # W·(N−1) window tokens ride along
    rounds = res.target_forwards - 1
    # the window starts one level deep and has its N − 1 levels from the second round on
    window = la.W + (rounds - 1) * la.W * (la.N - 1)
    assert res.verified_tokens == res.drafted_tokens + window


def test_the_cost_curve_is_timed_again_once_the_engine_is_warm():
    engine = wrap(tiny_llama(0), "lean")
    cold = probe.curve(engine, sizes=(1, 2))
    warm = probe.curve(engine, sizes=(1, 2), warm=True)
    assert warm is not cold  # timed again after warm-up
    assert probe.curve(engine, sizes=(1, 2)) is warm is probe.curve(engine, (1, 2), warm=True)


def test_an_automatic_budget_is_built_without_timing_the_full_curve(tmp_path):
    """EAGLE's auto budget at construction reads the engine's curve if one was timed, else a
    quick provisional one: the full curve is timed once, by the run, after warm-up."""
    from methods import budget

    engine = wrap(tiny_llama(0), "lean")
    d = save_head(engine, "eagle", tmp_path / "head")
    m = eagle_method(engine, "eagle", d, total_tokens="auto", k=6)
    assert probe.timed(engine) is None  # nothing cached: the full curve was not timed
    assert [int(q) for q in m.info["policy"]["limits"]["verify_cost_ms"]] == list(budget.QUICK)
    full = probe.curve(engine, warm=True)
    again = eagle_method(engine, "eagle", d, total_tokens="auto", k=6)
    cost = again.info["policy"]["limits"]["verify_cost_ms"]
    assert cost == {q: round(c * 1e3, 2) for q, c in full.items()}


def test_eagle_rechooses_its_budget_from_the_warm_curve_and_never_drafts_deeper(target, tmp_path):
    d = save_head(target, "eagle", tmp_path / "head")
    m = eagle_method(target, "eagle", d, total_tokens="auto", k=6)
    steep = {1: 1.0, 2: 1.2, 4: 2.0, 8: 4.0}  # only 2 tokens fit 1.5 × a decoding step
    assert m.calibrate(steep) or (m.total_tokens, m.depth) == (1, 1)
    assert (m.total_tokens, m.depth) == (1, 1) and m.policy.asked_depth == 6
    flat = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.1}
    m.calibrate(flat)
    assert m.total_tokens == 15 and m.depth == 6  # deep again: the budget allows it
    fixed = eagle_method(target, "eagle", d, total_tokens=3, k=6)
    assert not fixed.calibrate(steep) and (fixed.total_tokens, fixed.depth) == (3, 3)
