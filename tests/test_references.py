"""Checks against references outside our own decode loop, and forced acceptance.

- the target as its own draft: at T = 0 and at T = 1 every drafted token is accepted (the chain
  rule's min(1, p/q) is 1 when q = p), so τ is the most a chain of k allows;
- our `ar` against transformers' `generate()` (greedy, token for token);
- `probs()` against transformers' own logits processors (temperature, top-k, top-p, their
  combinations, ties at the top-p boundary);
- a planted right path off the first-child chain of a Medusa, recycling, EAGLE-2 or EAGLE-3
  tree is the path accepted, whole, every round (tests/forced.py drives the same methods with
  trees right at a rate, inside their own exactness tests).
"""

from __future__ import annotations

import pytest
import torch
from conftest import save_tiny, tiny_llama
from forced import planted
from helpers import make_ctx, method, prompts

from bench.decode.loop import generate
from groundfloor.clock import Clock
from groundfloor.sampling import SamplingParams, probs

pytestmark = pytest.mark.usefixtures("one_thread")
CLOCK = Clock(torch.device("cpu"))


@pytest.fixture(scope="module")
def self_draft_dir(tmp_path_factory):
    """The target's own weights saved as a draft model (seed 0, 2 layers, as tiny_llama(0))."""
    return save_tiny(tmp_path_factory.mktemp("selfdraft"), seed=0, layers=2)


@pytest.mark.parametrize("k", [1, 4])
def test_target_as_its_own_draft_accepts_every_token_at_t0(target, self_draft_dir, k):
    ctx = make_ctx(target, k)
    ar, dr = method("ar", ctx), method("draft", ctx, model=str(self_draft_dir))
    n = 33
    for p in prompts(4, seed=20 + k):
        base, res = (
            generate(ar, p, n, SamplingParams(), set(), CLOCK),
            generate(dr, p, n, SamplingParams(), set(), CLOCK),
        )
        assert res.output_ids == base.output_ids
        assert res.accepted_tokens == res.drafted_tokens > 0
        assert all(a == k for a in res.round_accepted[:-1])  # τ at the chain's maximum


def test_target_as_its_own_draft_accepts_every_token_at_t1(target, self_draft_dir):
    """q = p: a sampled draft is never rejected (a residual or ratio bug would reject some)."""
    k = 4
    ctx = make_ctx(target, k)
    dr = method("draft", ctx, model=str(self_draft_dir))
    sp = SamplingParams(temperature=1.0)
    drafted = accepted = 0
    for i, p in enumerate(prompts(6, seed=31)):
        g = torch.Generator().manual_seed(i)
        res = generate(dr, p, 40, sp, set(), CLOCK, generator=g)
        drafted += res.drafted_tokens
        accepted += res.accepted_tokens
    assert drafted > 100
    # p/q is 1 up to float rounding between a one-token and a (k+1)-token forward
    assert accepted >= drafted - 1


def test_ar_equals_transformers_generate_greedy():
    model = tiny_llama(0)
    ctx = make_ctx(model)
    ar = method("ar", ctx)
    for p in prompts(6, seed=41):
        n = 30
        ours = generate(ar, p, n, SamplingParams(), set(), CLOCK).output_ids
        ref = model.generate(
            torch.tensor([p]),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=3,
        )
        assert ours == ref[0, len(p) :].tolist()


def hf_probs(logits: torch.Tensor, sp: SamplingParams) -> torch.Tensor:
    """transformers' warpers in generate()'s order: temperature, top-k, top-p."""
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    x = logits.float().unsqueeze(0)
    ids = torch.zeros((1, 1), dtype=torch.long)
    x = TemperatureLogitsWarper(sp.temperature)(ids, x)
    if sp.top_k:
        x = TopKLogitsWarper(sp.top_k)(ids, x)
    if sp.top_p < 1.0:
        x = TopPLogitsWarper(sp.top_p)(ids, x)
    return torch.softmax(x, dim=-1)[0]


@pytest.mark.parametrize(
    "t,top_k,top_p",
    [
        (1.0, 0, 1.0),
        (0.7, 0, 1.0),
        (1.3, 5, 1.0),
        (1.0, 0, 0.9),
        (0.6, 0, 0.5),
        (1.0, 8, 0.8),
        (2.0, 3, 0.95),
        (1.0, 1, 1.0),
        (0.9, 0, 0.05),
    ],
)
def test_probs_equal_transformers_logits_processors(t, top_k, top_p):
    sp = SamplingParams(temperature=t, top_k=top_k, top_p=top_p)
    g = torch.Generator().manual_seed(7)
    for _ in range(20):
        logits = torch.randn(64, generator=g) * 3
        ours, ref = probs(logits, sp), hf_probs(logits, sp)
        assert torch.equal(ours > 0, ref > 0)  # the same tokens kept
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("top_p", [0.5, 0.6, 0.75])
def test_top_p_ties_at_the_boundary_keep_the_same_mass(top_p):
    """Tied logits straddle the top-p cut: which of the tied tokens stays is the sort's choice
    (transformers' too), but how many stay and the kept probabilities must agree."""
    logits = torch.tensor([2.0, 1.0, 1.0, 1.0, 1.0, 0.0, -1.0])
    sp = SamplingParams(temperature=1.0, top_p=top_p)
    ours, ref = probs(logits, sp), hf_probs(logits, sp)
    assert int((ours > 0).sum()) == int((ref > 0).sum())
    torch.testing.assert_close(ours.sort().values, ref.sort().values, rtol=1e-6, atol=1e-7)
    assert ours[0] == ours.max()  # the top token always stays


# --- a planted right path in a tree is the one accepted -------------------------------------


def tree_method(name, target, tmp_path):
    from helpers import random_heads
    from omegaconf import OmegaConf

    from methods.registry import build_method

    if name == "medusa":
        from drafters import medusa as heads_io

        d = tmp_path / "heads"
        heads_io.save(
            random_heads(target.output_weight().shape[1], 4, 1),
            d,
            "tiny",
            extra={"rank_accuracy": [[0.5, 0.2, 0.1]] * 4},
        )
        node = {
            "_target_": "methods.medusa.Medusa",
            "name": "medusa",
            "k": None,
            "heads": str(d),
            "tree": "medium",
            "tree_size": 8,
        }
    elif name in ("eagle", "eagle3"):
        from helpers import eagle_method, save_head

        return eagle_method(target, name, save_head(target, name, tmp_path / name, seed=3))
    else:
        from bench.run.config import CONF

        node = OmegaConf.load(CONF / "method" / f"{name}.yaml")
        node.k = None  # the whole static tree: k=auto's per-round pruning reads timings
    return build_method(OmegaConf.create(node), make_ctx(target))


@pytest.mark.parametrize("name", ["medusa", "recycling", "eagle", "eagle3"])
def test_a_planted_right_path_is_the_one_accepted(target, name, tmp_path):
    ar = method("ar", make_ctx(target))
    n = 30
    for p in prompts(3, seed=51):
        full = p + generate(ar, p, n + 16, SamplingParams(), set(), CLOCK).output_ids
        m = tree_method(name, target, tmp_path)
        picked = planted(m, full, 128)
        res = generate(m, p, n, SamplingParams(), set(), CLOCK)
        assert res.output_ids == full[len(p) : len(p) + n]
        assert any(off for _, off in picked)  # a branch other than the first was the right one
        # every round but the last takes the whole planted path
        assert res.round_accepted[:-1] == [d for d, _ in picked][: len(res.round_accepted) - 1]
        assert sum(1 for a in res.round_accepted if a >= 2) >= 2  # deep paths were taken
