"""The suffix automaton and suffix decoding's drafts against brute-force counting.

Every claim the methods rely on is checked on random token sequences over small alphabets
(many repeats): occurrence counts up to the counting depth, first end positions, the longest
earlier-occurring suffix, matching statistics, sequences kept apart by separators, and the
drafts `methods.suffix.speculate` builds from all that (chain and tree), recomputed here by
scanning the text.
"""

from __future__ import annotations

import heapq
import random

import pytest

from drafters.suffix_automaton import SuffixAutomaton
from methods.suffix import speculate


def ends(seqs: list[list[int]], s: list[int]) -> list[tuple[int, int]]:
    """(sequence, end index) of every occurrence of s inside one sequence."""
    n = len(s)
    return [
        (k, i + n - 1)
        for k, t in enumerate(seqs)
        for i in range(len(t) - n + 1)
        if t[i : i + n] == s
    ]


def random_text(rng, length=None, vocab=None) -> list[int]:
    vocab = vocab or rng.choice([2, 3, 5])
    return [rng.randrange(vocab) for _ in range(length or rng.randrange(1, 40))]


@pytest.mark.parametrize("seed", range(4))
def test_counts_first_ends_and_links_match_brute_force(seed):
    rng = random.Random(seed)
    for _ in range(40):
        depth = rng.choice([None, 1, 3, 6])
        text = random_text(rng)
        sam = SuffixAutomaton(count_depth=depth)
        for i, x in enumerate(text):
            sam.append(x)
            t = text[: i + 1]
            for a in range(len(t)):
                for b in range(a + 1, min(len(t), a + 7) + 1):
                    s, e = t[a:b], ends([t[: i + 1]], t[a:b])
                    v = sam.walk(s)
                    assert v > 0 and sam.first[v] == e[0][1]
                    if depth is not None and len(s) <= depth:
                        assert sam.count[v] == len(e)
            again = max([m for m in range(1, len(t)) if len(ends([t], t[-m:])) > 1], default=0)
            assert sam.length[sam.link[sam.end]] == again  # the longest suffix seen before
            if depth:
                w, n = sam.deep
                assert n == min(depth, len(t)) and sam.walk(t[-n:]) == w
        assert sam.walk([9]) == -1  # never occurs


def test_matching_statistics_and_separated_sequences():
    rng = random.Random(7)
    for _ in range(60):
        seqs = [random_text(rng, vocab=3) for _ in range(rng.randrange(1, 4))]
        sam = SuffixAutomaton(count_depth=5)
        for s in seqs:
            sam.extend_separated(s)
        query = random_text(rng, vocab=3)
        v, n = sam.match(query)
        longest = max([m for m in range(len(query) + 1) if m == 0 or ends(seqs, query[-m:])])
        assert n == longest and (n == 0 or sam.walk(query[-n:]) == v)
        for m, u in sam.suffix_states(v, n, 4):
            assert u == sam.walk(query[-m:])
            assert sam.count[u] == len(ends(seqs, query[-m:]))  # never across a separator
        for x, u in sam.children(sam.walk(query[-1:]) if ends(seqs, query[-1:]) else 0):
            assert x >= 0  # separators are not continuations


def brute_draft(seqs, context, k, factor, offset, min_prob, max_depth, tree):
    """Suffix decoding's draft by scanning: counts of substrings up to max_depth tokens."""

    def count(s):
        return len(ends(seqs, s)) if len(s) <= max_depth else 0

    def kids(s):
        nxt = {t[e + 1] for k_, e in ends(seqs, s) for t in [seqs[k_]] if e + 1 < len(t)}
        return sorted(((x, count(s + [x])) for x in nxt), key=lambda c: (-c[1], c[0]))

    best = ([], [], 0.0, 0)
    ctx = context[-max_depth:]
    for m in range(1, len(ctx)):
        s = ctx[-m:]
        if not count(s):
            break
        budget = min(k, int(m * factor + offset + 1e-6))
        tokens, parents, score, heap, tick = [], [], 0.0, [], 0

        def push(path, prob, parent):
            nonlocal tick
            if len(path) >= max_depth:
                return
            for x, c in kids(path):
                p = prob * c / count(path)
                if p < min_prob:
                    break
                heapq.heappush(heap, (-p, tick, path + [x], parent))
                tick += 1
                if not tree:
                    break

        if budget > 0:
            push(s, 1.0, -1)
        while heap and len(tokens) < budget:
            neg, _, path, parent = heapq.heappop(heap)
            tokens.append(path[-1])
            parents.append(parent)
            score -= neg
            push(path, -neg, len(tokens) - 1)
        if score >= best[2]:
            best = (tokens, parents, score, m)
    return best


@pytest.mark.parametrize("tree", [False, True])
def test_drafts_match_brute_force(tree):
    rng = random.Random(11 if tree else 12)
    for _ in range(150):
        seqs = [
            random_text(rng, length=rng.randrange(2, 30), vocab=rng.choice([2, 3, 4]))
            for _ in range(rng.randrange(1, 3))
        ]
        context = seqs[-1]  # the local index holds the context itself
        knobs = dict(
            k=rng.choice([1, 3, 8]),
            factor=rng.choice([0.5, 1.0, 2.0]),
            offset=rng.choice([0.0, 1.0]),
            min_prob=rng.choice([0.0, 0.1, 0.4]),
            max_depth=rng.choice([3, 5, 24]),
            tree=tree,
        )
        sam = SuffixAutomaton(count_depth=knobs["max_depth"])
        for s in seqs:
            sam.extend_separated(s)
        longest = min(knobs["max_depth"], len(context)) - 1
        v, n = sam.match(context[-knobs["max_depth"] :])
        got = speculate(sam, v, n, longest, *knobs.values())
        want = brute_draft(seqs, context, *knobs.values())
        assert (got.tokens, got.parents) == (want[0], want[1]), knobs
        assert got.score == pytest.approx(want[2])
        if got.tokens:
            assert got.match_len == want[3]


def suffix_on_tiny(**knobs):
    """The suffix method (fixed k, chain) on the tiny lean target."""
    from conftest import tiny_llama
    from helpers import make_ctx

    from engines.load import wrap
    from methods.registry import build_method, method_config

    ctx = make_ctx(wrap(tiny_llama(0), "lean"))
    return build_method(method_config("suffix", {"k": 6, **knobs}), ctx)


def turns_with_evictions_and_repeats():
    """Prompts whose answers recur (q continues p's answer), more of them than max_cached=2
    keeps (an eviction and a rebuild every turn from the third), and repeats of earlier
    prompts (the cache restored to where their first run started)."""
    from helpers import prompts

    return prompts(4, seed=21)


def test_index_work_between_turns_runs_inside_the_clock(one_thread, monkeypatch):
    """Past max_cached outputs every turn rebuilds the global index; that work (and each
    append) runs in draft_prefill, which the decode loop times as drafting, never in the
    untimed start or finish."""
    import inspect

    from helpers import run

    callers = []
    honest = SuffixAutomaton.extend_separated

    def spy(self, tokens):  # the real method, its callers noted
        callers.append({f.function for f in inspect.stack()[1:12]})
        return honest(self, tokens)

    monkeypatch.setattr(SuffixAutomaton, "extend_separated", spy)
    from helpers import prompts

    m = suffix_on_tiny(max_cached=2)
    for p in prompts(6, seed=5):
        res = run(m, p, n=12)
        assert m.responses.pending[-1] == res.output_ids  # left for the next turn's clock
    # turns 2, 3 append the one before; turns 4-6 evict and rebuild from the two kept
    assert len(callers) == 1 + 1 + 2 + 2 + 2
    assert all("draft_prefill" in c and not {"finish", "begin", "end"} & c for c in callers)


def test_the_deferred_index_drafts_what_an_index_updated_at_once_drafts(one_thread):
    """The same turns on two suffix methods, one whose index is brought up to date at every
    turn's end (the old, untimed, behaviour) and one that defers it to the next draft_prefill:
    the same tokens, drafts and accepts at every turn, and both indexes hold the kept outputs
    in order."""
    from helpers import run

    lazy, eager = suffix_on_tiny(max_cached=2), suffix_on_tiny(max_cached=2)
    ps = turns_with_evictions_and_repeats()
    first = run(suffix_on_tiny(), ps[0], n=12).output_ids
    ps.append(ps[0] + first[:3])  # its answer continues ps[0]'s, found in the global index
    hits = 0
    for p in ps + ps[:2] + ps[-1:]:
        a = run(lazy, p, n=12)
        b = run(eager, p, n=12)
        eager.responses.sync()
        assert (a.output_ids, a.accept_lengths, a.drafted_tokens) == (
            b.output_ids, b.accept_lengths, b.drafted_tokens
        )  # fmt: skip
        hits += a.accepted_tokens
    lazy.responses.sync()
    kept = list(lazy.responses.outputs.values())
    assert len(kept) == 2 and lazy.responses.index.tokens == eager.responses.index.tokens
    assert lazy.responses.index.tokens == [-1, *kept[0], -2, *kept[1]]
    assert hits > 0
