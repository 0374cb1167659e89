"""Tree verification on an unmodified model, Medusa heads' file layout, and greedy exactness."""

from __future__ import annotations

import json

import pytest
import torch
from forced import run_forced
from helpers import make_ctx, prompts, random_heads, run
from omegaconf import OmegaConf

from drafters import medusa as heads_io
from groundfloor.tree import TreeLayout
from methods import static_trees
from methods.registry import build_method
from methods.treeverify import keep_path, verify_tree


def test_tree_nodes_match_sequential_decoding(target):
    layout, order = TreeLayout.from_paths([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(4, 128, (12,), generator=g)
    tokens = torch.randint(4, 128, (layout.size,), generator=g)
    cache = target.new_cache(32)
    with torch.no_grad():
        target.forward(prompt[None, :-1], cache)
        out = verify_tree(target, prompt[-1:], tokens, layout, cache)
        for j in range(layout.size):
            path, n = [], j
            while n >= 0:
                path.append(n)
                n = layout.parents[n]
            seq = torch.cat([prompt, tokens[torch.tensor(path[::-1])]])
            ref = target.forward(seq[None], target.new_cache(32)).logits[0, -1]
            assert torch.allclose(ref, out.logits[0, j + 1], atol=1e-5)  # node j: row j + 1
        keep_path(cache, 11, [0, 3])
        assert cache.length == 14


def test_sized_tree_is_prefix_closed_and_best_first():
    acc = [[0.6, 0.2, 0.1], [0.4, 0.2, 0.1], [0.3, 0.1, 0.05]]
    paths = static_trees.sized_tree(acc, 4, 3)
    assert paths == [[0], [0, 0], [1], [0, 1]]  # 0.6, 0.24, 0.2, 0.12 beat [2] at 0.1
    deep = static_trees.sized_tree(acc, 12, 2)
    assert all(p[:-1] in deep or len(p) == 1 for p in deep) and max(map(len, deep)) == 2
    TreeLayout.from_paths(paths)


def test_published_layout_round_trip(tmp_path, target):
    lm = target.output_weight()
    h = random_heads(lm.shape[1], 3, 0)
    heads_io.save(
        h, tmp_path / "shared", "tiny", extra={"rank_accuracy": [[0.5]] * 3}, dtype=torch.float32
    )
    heads_io.save(h, tmp_path / "full", "tiny", lm_head=lm, export_full=True, dtype=torch.float32)
    cfg = json.loads((tmp_path / "full" / "config.json").read_text())
    assert cfg["medusa_num_heads"] == 3 and cfg["medusa_num_layers"] == 1
    from safetensors.torch import load_file

    keys = set(load_file(str(tmp_path / "full" / heads_io.WEIGHTS)))
    assert {"0.0.linear.weight", "0.0.linear.bias", "0.1.weight", "2.1.weight"} <= keys
    x = torch.randn(4, lm.shape[1])
    ref = h.logits(x, lm)
    for d in ("shared", "full"):
        loaded, _ = heads_io.load(tmp_path / d)
        assert torch.allclose(loaded.logits(x, lm), ref, atol=1e-5)


@pytest.mark.parametrize("tree", ["chain", "small", "medium", "auto"])
def test_medusa_reproduces_ar(target, tmp_path, tree):
    lm = target.output_weight()
    d = tmp_path / "heads"
    heads_io.save(
        random_heads(lm.shape[1], 4, 1), d, "tiny", extra={"rank_accuracy": [[0.5, 0.2, 0.1]] * 4}
    )
    ctx = make_ctx(target)
    ar = build_method("ar", ctx)
    md = build_method(
        OmegaConf.create(
            {
                "_target_": "methods.medusa.Medusa",
                "name": "medusa",
                "k": None,
                "heads": str(d),
                "tree": tree,
                "tree_size": 8,
            }
        ),
        ctx,
    )
    for p in prompts(6, seed=7):
        base, res = run(ar, p), run(md, p)
        assert res.output_ids == base.output_ids
        assert res.drafted_tokens == md.layout.size * (len(res.accept_lengths) - 1)
    # random heads accept almost nothing: force right nodes at 60% so the accept path runs deep
    # and rejects part-way down, and check it takes exactly the right path each round
    for i, p in enumerate(prompts(3, seed=8)):
        run_forced(md, ar, p, run, seed=i)


def test_medusa_sampling_is_seeded(target, tmp_path):
    from bench.decode.loop import generate
    from groundfloor.clock import Clock
    from groundfloor.sampling import SamplingParams

    lm = target.output_weight()
    d = tmp_path / "heads"
    heads_io.save(random_heads(lm.shape[1], 3, 2), d, "tiny")
    md = build_method(
        OmegaConf.create(
            {
                "_target_": "methods.medusa.Medusa",
                "name": "medusa",
                "heads": str(d),
                "tree": "small",
                "k": None,  # the whole tree: k=auto's pruning reads timings, so its draws vary
            }
        ),
        make_ctx(target),
    )
    sp = SamplingParams(temperature=1.0)
    out = [
        generate(
            md,
            prompts(1)[0],
            30,
            sp,
            set(),
            Clock(torch.device("cpu")),
            torch.Generator().manual_seed(s),
        ).output_ids
        for s in (5, 5, 6)
    ]
    assert out[0] == out[1] != out[2] and len(out[0]) == 30


@pytest.mark.usefixtures("one_thread")
def test_check_distribution_passes_on_a_medusa_tree(tiny_target_dir, tmp_path):
    """The tree rule on a real Medusa tree (point-mass siblings at several depths), at T = 1."""
    from conftest import compose
    from helpers import tiny_run

    from bench.run.runner import execute
    from groundfloor.models import load_model

    tgt, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    lm = tgt.get_output_embeddings().weight.detach()
    d = tmp_path / "heads"
    heads_io.save(random_heads(lm.shape[1], 3, 4), d, "tiny")
    summary, _, _ = execute(
        compose(
            [
                "method=medusa",
                f"method.heads={d}",
                "method.tree=medium",
                "method.k=null",  # the whole tree every round (k=auto may prune it to none)
                *tiny_run(tiny_target_dir, tmp_path),
            ]
        ),
        tmp_path,
    )
    ev = json.loads((tmp_path / "distcheck.json").read_text())
    assert 0 < ev["accepted_tokens"] < ev["drafted_tokens"]
    assert summary.dist_pvalue.iloc[0] > 0.01


def test_published_pt_layout_loads(tmp_path, target):
    """Medusa's own training script saves `medusa_lm_head.pt` (keys prefixed `medusa_head.`,
    each head with its own projection): the same logits as the safetensors layout."""
    lm = target.output_weight()
    h = random_heads(lm.shape[1], 3, 0)
    heads_io.save(h, tmp_path / "st", "tiny", lm_head=lm, export_full=True, dtype=torch.float32)
    from safetensors.torch import load_file

    state = {
        f"medusa_head.{k}": v for k, v in load_file(str(tmp_path / "st" / heads_io.WEIGHTS)).items()
    }
    (tmp_path / "pt").mkdir()
    torch.save(state, tmp_path / "pt" / "medusa_lm_head.pt")
    (tmp_path / "pt" / "config.json").write_text((tmp_path / "st" / "config.json").read_text())
    x = torch.randn(4, lm.shape[1])
    loaded, cfg = heads_io.load(tmp_path / "pt")
    assert loaded.own is not None and cfg["medusa_num_heads"] == 3
    assert torch.allclose(loaded.logits(x, lm), h.logits(x, lm), atol=1e-5)


def test_typical_acceptance_follows_medusas_rule(target, tmp_path):
    """Accept a child x of a row when p(x) > min(ε, α·exp(−H(p))) (ε = 0.09, α = 0.3), take the
    most probable admissible child (not the first), and when none is, sample from p."""
    import types

    from groundfloor.sampling import SamplingParams
    from groundfloor.tree import Tree

    d = tmp_path / "heads"
    heads_io.save(
        random_heads(target.output_weight().shape[1], 2, 1),
        d,
        "tiny",
        extra={"rank_accuracy": [[0.5, 0.2]] * 2},
    )
    md = build_method(
        OmegaConf.create(
            {
                "_target_": "methods.medusa.Medusa",
                "name": "medusa",
                "k": None,
                "heads": str(d),
                "tree": "chain",
                "acceptance": "typical",
            }
        ),
        make_ctx(target),
    )
    assert md.name == "medusa-typical" and not md.lossless
    V = 128

    def row(p_of: dict[int, float]):
        rest = (1 - sum(p_of.values())) / (V - len(p_of))
        p = torch.full((V,), rest)
        for t, v in p_of.items():
            p[t] = v
        return p.log()

    # row 0 (root): p = .6/.3 on tokens 5/6, H ≈ 1.39, threshold ≈ 0.075: tokens 5 and 6 pass,
    # token 9 (p ≈ 0.0008) does not; row 2 (node 1) is flat: threshold 0.3/128 < p = 1/128;
    # row 4 (node 3) has no children: the next token is sampled there (almost surely 11)
    logits = torch.stack([row({5: 0.6, 6: 0.3}), row({}), row({}), row({}), row({11: 1 - 1e-6})])
    tree = Tree(parents=[-1, -1, -1, 1], tokens=torch.tensor([6, 5, 9, 7]))
    state = types.SimpleNamespace(
        sampling=SamplingParams(temperature=1.0), generator=torch.Generator().manual_seed(0)
    )
    assert md._typical(logits, tree, state) == ([1, 3], 11)
    only_rare = Tree(parents=[-1], tokens=torch.tensor([9]))  # below the threshold: rejected
    assert md._typical(logits, only_rare, state)[0] == []


def test_medusa_runs_only_the_heads_its_nodes_come_from(target, tmp_path):
    """A node at depth d is head d - 1's: a tree one deep over four heads runs head 0 alone, and
    k=auto choosing no node runs none (a plain round). Each head reads h alone, so its logits
    are the ones every head run together gives."""
    lm = target.output_weight()
    d = tmp_path / "heads"
    heads_io.save(random_heads(lm.shape[1], 4, 3), d, "tiny")
    knobs = {"_target_": "methods.medusa.Medusa", "name": "medusa", "heads": str(d)}
    md = build_method(OmegaConf.create({**knobs, "k": 1, "tree": "chain"}), make_ctx(target))
    calls = []
    for i, blk in enumerate(md.heads.blocks):
        blk.register_forward_hook(lambda mod, inp, out, i=i: calls.append(i))
    res = run(md, prompts(1, seed=3)[0], n=12)
    assert calls and set(calls) == {0} and len(calls) == len(res.accept_lengths) - 1
    h = torch.randn(lm.shape[1])
    every, first = md.heads.logits(h, lm), md.heads.logits(h, lm, 1)
    assert first.shape[0] == 1 and torch.allclose(first[0], every[0], atol=1e-5)

    m = build_method(OmegaConf.create({**knobs, "k": "auto", "tree": "medium"}), make_ctx(target))
    m.calibrate({1: 0.004, 2: 0.005, 4: 0.006, 8: 0.008}, (0.0005, 0.0))
    m.policy.choose = lambda steps, allowed=None: []  # k=auto verifies none of the template
    calls.clear()
    for i, blk in enumerate(m.heads.blocks):
        blk.register_forward_hook(lambda mod, inp, out, i=i: calls.append(i))
    res = run(m, prompts(1, seed=3)[0], n=12)
    assert not calls and res.drafted_tokens == 0
