"""The oracle drafter: every draft accepted at T = 0 (τ at the maximum a chain of k allows),
outputs exact, on both engines; at T = 1 still lossless (tests/test_distcheck.py style)."""

from __future__ import annotations

import pytest
import torch
from helpers import make_ctx, method, prompts

from bench.decode.loop import generate
from groundfloor.clock import Clock
from groundfloor.sampling import SamplingParams

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("k", [1, 3, 8])
def test_oracle_accepts_every_draft_and_is_exact(target, k):
    ctx = make_ctx(target, k)
    ar = method("ar", ctx)
    oracle = method("oracle", ctx)
    for p in prompts(4, seed=k):
        n = 40
        base = generate(ar, p, n, SamplingParams(), set(), Clock(torch.device("cpu")))
        res = generate(oracle, p, n, SamplingParams(), set(), Clock(torch.device("cpu")))
        assert res.output_ids == base.output_ids
        assert res.accepted_tokens == res.drafted_tokens > 0
        # every round but the last takes k drafts + the bonus: τ is the most a chain allows
        assert all(a == k for a in res.round_accepted[:-1])
        assert res.target_forwards == 1 + -(-(n - 1) // (k + 1))


def test_oracle_stops_at_eos(target):
    ctx = make_ctx(target, 4)
    full = generate(
        method("ar", ctx), prompts(1)[0], 30, SamplingParams(), set(), Clock(torch.device("cpu"))
    )
    eos = {full.output_ids[12]}
    ctx.eos = frozenset(eos)
    base = generate(
        method("ar", ctx), prompts(1)[0], 30, SamplingParams(), eos, Clock(torch.device("cpu"))
    )
    res = generate(
        method("oracle", ctx), prompts(1)[0], 30, SamplingParams(), eos, Clock(torch.device("cpu"))
    )
    assert res.output_ids == base.output_ids and res.stop == "eos"
