"""The training-free methods (suffix, sam, recycling, lookahead): greedy exactness against `ar`
on both engines with drafts that are actually accepted, their cross-turn state, and the
run-level distribution check at T = 1."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import compose, tiny_llama, tiny_tokenizer
from helpers import make_ctx, prompts, run, save_head, tiny_run

from bench.run.runner import execute
from drafters.suffix_automaton import SuffixAutomaton
from engines.load import wrap
from groundfloor.errors import UserError
from methods.lookahead import trie, window_parents
from methods.registry import build_method, method_config

pytestmark = pytest.mark.usefixtures("one_thread")


def conf(name: str, **kw):
    """A method's shipped YAML with knobs replaced; k=auto pinned to the method's fixed k
    (fixed_k, or null: the whole tree), so these tests see fixed draft sizes
    (tests/test_adaptive.py tests auto)."""
    node = method_config(name, kw)
    if "k" not in kw and node.get("k") == "auto":
        node.k = node.get("fixed_k")
    return node


def repetitive(count, seed=0):
    """Prompts with a repeated segment (retrieval methods find matches at once)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        seg = torch.randint(
            4, 128, (int(torch.randint(4, 10, (1,), generator=g)),), generator=g
        ).tolist()
        out.append(
            seg + torch.randint(4, 128, (3,), generator=g).tolist() + seg + seg[: len(seg) // 2]
        )
    return out


CASES = {
    "suffix": {},
    "suffix-tree": {"shape": "tree"},
    "sam": {},
    "recycling": {},
    "recycling-small": {"tree": "small", "k": 2},
    "lookahead": {},
    "lookahead-wide": {"W": 6, "N": 4, "G": 2},
    "lookahead-n2": {"N": 2},
    "lookahead-jacobi": {"pool_from_prompt": False},
}


@pytest.mark.parametrize("case", CASES)
def test_greedy_output_equals_ar_and_drafts_are_accepted(target, case):
    ctx = make_ctx(target)
    ar = build_method("ar", ctx)
    m = build_method(conf(case.split("-")[0], **CASES[case]), ctx)
    accepted = emitted = 0
    for p in repetitive(4) + prompts(2, seed=5):
        base, res = run(ar, p, n=40), run(m, p, n=40)
        assert res.output_ids == base.output_ids
        assert sum(res.accept_lengths) == len(res.output_ids)
        assert res.target_forwards < base.target_forwards
        accepted += res.accepted_tokens
        emitted += len(res.output_ids)
    assert accepted >= 0.3 * emitted  # a method drafting nothing (or nothing right) fails


def test_suffix_cross_request_cache(target):
    ctx = make_ctx(target)
    p = prompts(1, seed=21)[0]
    fresh = run(build_method(conf("suffix"), ctx), p)
    # a repeat of the same prompt does not draft from its own earlier output ...
    m = build_method(conf("suffix"), ctx)
    first, again = run(m, p), run(m, p)
    assert again.accept_lengths == first.accept_lengths == fresh.accept_lengths
    # ... unless asked to, and a different prompt always may
    hit = build_method(conf("suffix", reuse_same_prompt=True), ctx)
    run(hit, p)
    warm = run(hit, p)
    assert warm.output_ids == first.output_ids
    assert warm.target_forwards < first.target_forwards  # its own answer, found token by token
    q = p + first.output_ids[:3]  # another prompt, whose answer continues p's
    other, alone = run(m, q), run(build_method(conf("suffix"), ctx), q)
    assert other.output_ids == alone.output_ids == first.output_ids[3:] + other.output_ids[-3:]
    assert other.target_forwards < alone.target_forwards


def test_suffix_repeats_of_a_two_turn_conversation_draft_alike(target):
    """Repeat 1 of a two-turn conversation drafts exactly as repeat 0 did: its turn 1 does not
    find the turn-2 answer repeat 0 left in the cross-request cache."""
    ctx = make_ctx(target)
    p = prompts(1, seed=21)[0]
    m = build_method(conf("suffix"), ctx)
    reps = []
    for _ in range(2):
        one = run(m, p)
        two = run(m, p + one.output_ids + p)  # turn 2 asks again: its answer echoes turn 1's
        reps.append((one, two))
    for (a1, a2), (b1, b2) in [(reps[0], reps[1])]:
        assert b1.accept_lengths == a1.accept_lengths and b1.drafted_tokens == a1.drafted_tokens
        assert b2.accept_lengths == a2.accept_lengths and b2.drafted_tokens == a2.drafted_tokens
    # the leak this guards against was there to find: turn 2's answer shares 3-grams with turn 1's
    grams = lambda ids: {tuple(ids[i : i + 3]) for i in range(len(ids) - 2)}  # noqa: E731
    assert grams(reps[0][0].output_ids) & grams(reps[0][1].output_ids)


def test_suffix_eviction_bound(target):
    m = build_method(conf("suffix", max_cached=2), make_ctx(target))
    outs = [run(m, p, n=12).output_ids for p in prompts(3, seed=4)]
    assert list(m.responses.outputs.values()) == outs[1:]  # the oldest went first
    m.responses.sync()  # what the next turn's draft_prefill runs, inside its clock
    assert m.responses.index.tokens == [-1, *outs[1], -2, *outs[2]]  # rebuilt from the kept
    assert build_method(conf("suffix", max_cached=0), make_ctx(target)).responses.limit == 0


def test_recycling_hot_start_and_repeats(target):
    ctx = make_ctx(target)
    p, q = prompts(2, seed=31)
    m = build_method(conf("recycling"), ctx)
    first = run(m, p)
    after = run(m, q)
    again = run(m, p)  # starts from the matrix p's first run started from
    assert again.accept_lengths == first.accept_lengths
    cold = run(build_method(conf("recycling", hot_start=False), ctx), q)
    assert cold.output_ids == after.output_ids and cold.drafted_tokens != after.drafted_tokens
    assert m.static_bytes() == 128 * m.width * 8


def test_lookahead_shapes():
    assert trie([(5, 6), (5, 7), (8,)]) == ([5, 6, 7, 8], [-1, 0, 0, -1])
    # two levels of three columns after two draft nodes: a chain, then one node per column
    assert window_parents(2, 3, 2) == [-1, 2, 3, 2, 3, 4]


def test_lookahead_window_is_never_accepted(target):
    m = build_method(conf("lookahead", W=5, N=4, G=3), make_ctx(target))
    res = run(m, repetitive(1, seed=3)[0], n=30)
    assert 0 < len(res.drafted_per_pos) <= m.N - 1  # the window (W + N − 2 deep) never counts
    assert res.drafted_tokens <= (len(res.accept_lengths) - 1) * m.G * (m.N - 1)
    assert m.max_verify_width() == 1 + (5 + 3) * 3


def test_sam_static_corpus(target, tmp_path):
    tok = tiny_tokenizer()
    ctx = make_ctx(target)
    ctx.tokenizer = tok
    p = prompts(1, seed=41)[0]
    out = run(build_method("ar", ctx), p).output_ids
    text = tok.decode(p + out)
    assert tok(text, add_special_tokens=False)["input_ids"] == p + out  # words round-trip
    (tmp_path / "corpus.txt").write_text("the the a\n" + text + "\n")
    m = build_method(conf("sam", corpus=str(tmp_path / "corpus.txt")), ctx)
    res = run(m, p)
    assert res.output_ids == out
    assert res.accept_lengths[1] == m.k + 1  # the corpus holds the answer: a full draft
    assert m.info["corpus_tokens"] == 3 + len(p + out) + 2  # two separators
    plain = run(build_method(conf("sam"), ctx), p)
    assert res.accepted_tokens > plain.accepted_tokens


@pytest.fixture(scope="module")
def eagle_target():
    return {e: wrap(tiny_llama(0, layers=4), e) for e in ("hf", "lean")}


@pytest.mark.parametrize("engine", ["hf", "lean"])
def test_sam_with_eagle_fallback_equals_ar(eagle_target, engine, tmp_path):
    tgt = eagle_target[engine]
    d = save_head(tgt, "eagle", tmp_path / "head", seed=3)
    ctx = make_ctx(tgt)
    m = build_method(
        conf(
            "sam",
            fallback="eagle",
            min_match=2,
            fallback_overrides={"heads": str(d), "top_k": 3, "total_tokens": 10, "k": 3},
        ),
        ctx,
    )
    assert m.name == "sam+eagle" and m.fallback.total_tokens == 10
    assert m.max_verify_width() == 11
    used = {"eagle": 0}
    draft = m.fallback.draft

    def counted(state):
        used["eagle"] += 1
        return draft(state)

    m.fallback.draft = counted
    ar = build_method("ar", ctx)
    rounds = 0
    for p in repetitive(2, seed=8) + prompts(2, seed=9):
        base, res = run(ar, p), run(m, p)
        assert res.output_ids == base.output_ids
        rounds += len(res.accept_lengths) - 1
    assert 0 < used["eagle"] < rounds  # both the automaton and the head drafted


BAD = [
    ("suffix", {"shape": "star"}, "method.shape='star': choose one of: chain, tree"),
    ("suffix", {"max_cached": -1}, "method.max_cached=-1"),
    ("suffix", {"min_token_prob": 2}, "method.min_token_prob=2.0"),
    ("sam", {"fallback": "ngram"}, "method.fallback='ngram': choose one of: eagle, eagle3, medusa"),
    ("sam", {"corpus": "/nonexistent.txt"}, "method.corpus='/nonexistent.txt' is not a file"),
    ("sam", {"min_match": 0}, "method.min_match=0"),
    ("recycling", {"tree": "huge"}, "method.tree='huge' is unknown"),
    ("recycling", {"tree": [[1, 0]]}, "method.tree: tree path (1, 0) has no parent path"),
    ("lookahead", {"N": 1}, "W=4, N=1, G=4: need W >= 1, N >= 2"),
]


@pytest.mark.parametrize("name,knobs,message", BAD)
def test_bad_knobs_are_one_clear_line(target, name, knobs, message):
    with pytest.raises(UserError) as e:
        build_method(conf(name, **knobs), make_ctx(target))
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("method", ["suffix", "sam", "recycling", "lookahead"])
def test_check_distribution_passes(method, tiny_target_dir, tmp_path):
    """Point-mass drafts through the tree rule at T = 1: the method samples ar's law."""
    # fixed sizes: random tiny models accept so little that k=auto would draft almost nothing
    # (tests/test_adaptive.py checks auto's law)
    # recycling's matrix fills from the draws themselves: over 3 positions it drafts under
    # check=distribution's floor (untested), over 6 well above it
    fixed = {
        "suffix": ["k=8"],
        "sam": ["k=8"],
        "recycling": ["method.k=null", "dist_positions=6"],
    }.get(method, [])
    summary, _, _ = execute(
        compose([f"method={method}", *tiny_run(tiny_target_dir, tmp_path), *fixed]), tmp_path
    )
    ev = json.loads((tmp_path / "distcheck.json").read_text())
    assert 0 < ev["accepted_tokens"] < ev["drafted_tokens"]
    assert summary.dist_pvalue.iloc[0] > 0.01


def test_suffix_index_memory_is_reported():
    sam = SuffixAutomaton(list(range(50)) * 2, count_depth=4)
    assert sam.nbytes() > 0 and sam.states > 50


def test_check_distribution_passes_with_eagle_fallback(tiny_target_dir, tmp_path):
    """sam + eagle at T = 1: chains and EAGLE trees alternate through one tree rule."""
    from groundfloor.models import load_model

    tgt, _ = load_model(str(tiny_target_dir), torch.device("cpu"), torch.float32)
    d = save_head(tgt, "eagle", tmp_path / "head", seed=4)
    summary, _, _ = execute(
        compose(
            [
                "method=sam",
                "method.fallback=eagle",
                "method.min_match=2",
                f"+method.fallback_overrides={{heads: '{d}', top_k: 4, total_tokens: 12, k: 3}}",
                *tiny_run(tiny_target_dir, tmp_path),
            ]
        ),
        tmp_path,
    )
    ev = json.loads((tmp_path / "distcheck.json").read_text())
    assert ev["method"] == "sam+eagle"
    assert 0 < ev["accepted_tokens"] < ev["drafted_tokens"]
    assert summary.dist_pvalue.iloc[0] > 0.01
