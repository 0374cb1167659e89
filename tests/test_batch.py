"""Several conversations decoded together (bench.decode.batch, engines.shared): every sequence's
tokens are its batch-1 tokens, for every in-process method, with prompts of different lengths,
conversations of several turns, sequences that stop early and more conversations than slots."""

from __future__ import annotations

import pytest
import torch
from helpers import GREEDY, build, engine_of, make_ctx, prompts, run, tiny_knobs

from bench.decode.batch import Batch
from methods.registry import build_method, method_config, method_names

pytestmark = pytest.mark.usefixtures("one_thread")

BATCHED = [m for m in method_names() if engine_of(m) == "lean"]  # transformers' own: whole turns


def maker(env, name):
    """make_method for Batch: the method's YAML with its tiny knobs on `target` (a seat)."""
    return lambda target: build(env, name, tiny_knobs(name), target=target)


def one_turn(conv, turn, outputs):
    return conv if turn == 0 else None


def forced(env, name):
    """maker with drafting forced: k=auto pinned to the method's fixed size (fixed_k, or null:
    its whole tree), as k=auto may stay plain on the tiny models (and even forced to draft,
    it may verify no node, by measured costs), and a batch of plain rounds would not test the
    drafts' rows."""
    knobs = dict(tiny_knobs(name))
    node = method_config(name, knobs)
    if node.get("k") == "auto":
        knobs["k"] = node.get("fixed_k")
    return lambda target: build(env, name, knobs, target=target)


@pytest.mark.parametrize("name", BATCHED)
def test_every_method_in_a_batch_decodes_its_batch_1_tokens(env, name):
    convs = prompts(5, seed=11)  # 3–29 tokens each; 5 conversations over 2 slots
    make = forced(env, name)
    want = [run(make(None), c, n=20).output_ids for c in convs]
    out = Batch(env["lean"], make, 2).run(convs, one_turn, 20, GREEDY, set())
    assert [out.turns[(i, 0)].output_ids for i in range(5)] == want
    assert set(out.slot_of.values()) == {0, 1}
    assert out.merged > 0  # forwards held several sequences' rows
    drafted = sum(t.drafted_tokens for t in out.turns.values())
    assert drafted > 0 or name == "ar"  # the drafts went through the shared forward


def test_each_conversation_keeps_its_own_budget_and_b_1_time_is_its_turns_wall(env):
    """A list of budgets: each conversation decodes its own count (not the largest), its
    tokens a lone decode's with that budget; at B = 1 the batch's time is the Σ of its turns'
    wall, the batch-1 cell's clock; at B = 3 it lies between the longest turn and their Σ."""
    convs, budgets = prompts(4, seed=3), [3, 12, 7, 20]
    ar = build(env, "ar", {})
    want = [run(ar, c, n=n).output_ids for c, n in zip(convs, budgets)]
    for size in (1, 3):
        out = Batch(env["lean"], maker(env, "ngram"), size).run(
            convs, one_turn, budgets, GREEDY, set()
        )
        assert [out.turns[(i, 0)].output_ids for i in range(4)] == want
        walls = [t.times_ns["wall"] / 1e9 for t in out.turns.values()]
        if size == 1:
            assert out.wall_s == pytest.approx(sum(walls), rel=1e-12)
        else:
            assert max(walls) <= out.wall_s <= sum(walls)
    with pytest.raises(ValueError, match="2 budgets for 4 conversations"):
        Batch(env["lean"], maker(env, "ar"), 2).run(convs, one_turn, [3, 4], GREEDY, set())


def test_covered_time_counts_overlapping_turns_once():
    from bench.decode.batch import covered_s

    assert covered_s([]) == covered_s([None]) == 0
    assert covered_s([(0, 10), (30, 40)]) * 1e9 == pytest.approx(20)
    assert covered_s([(5, 20), (0, 10), (8, 12), (30, 40)]) * 1e9 == pytest.approx(30)


@pytest.mark.parametrize("size", [1, 2, 4])
def test_turns_early_stops_and_more_conversations_than_slots(env, size):
    """Two-turn conversations (the second turn's prompt built from the first's output), one
    sequence ending at an EOS token after a few tokens, seven conversations: each turn's tokens
    equal a lone decode of the same prompt, whatever the slot count."""
    convs = prompts(7, seed=4)
    ar = build(env, "ar", {})
    eos = {run(ar, convs[2], n=6).output_ids[3]}  # conversation 2 stops early

    def two_turns(conv, turn, outputs):
        return conv if turn == 0 else conv + outputs[0] + [5, 6] if turn == 1 else None

    want = {}
    for i, c in enumerate(convs):
        first = run(ar, c, n=12, eos=eos).output_ids
        second = run(ar, two_turns(c, 1, [first]), n=12, eos=eos).output_ids
        want[(i, 0)], want[(i, 1)] = first, second
    out = Batch(env["lean"], maker(env, "ngram"), size).run(convs, two_turns, 12, GREEDY, eos)
    assert {key: res.output_ids for key, res in out.turns.items()} == want
    assert len(out.turns[(2, 0)].output_ids) < 12 and out.turns[(2, 0)].stop == "eos"
    assert out.new_tokens == sum(len(v) for v in want.values()) and out.tokens_per_s > 0


def test_an_engine_without_forward_seqs_runs_each_request(env):
    """The hf engine has no forward_seqs: the shared forward runs the requests one by one,
    with the same tokens."""
    convs = prompts(3, seed=2)
    ctx = make_ctx(env["hf"])
    want = [run(build_method("ar", ctx), c, n=10).output_ids for c in convs]

    def make(target):
        c = make_ctx(env["hf"])
        c.target = target
        return build_method("ar", c)

    out = Batch(env["hf"], make, 3).run(convs, one_turn, 10, GREEDY, set())
    assert [out.turns[(i, 0)].output_ids for i in range(3)] == want


def test_a_failing_sequence_raises_and_frees_the_others(env):
    """A method that raises in one slot: the run raises that error, and no other slot waits
    for it forever."""
    make = maker(env, "ar")

    def broken(target):
        m = make(target)
        if len(made) == 1:
            m.draft = lambda state: (_ for _ in ()).throw(RuntimeError("drafter broke"))
        made.append(m)
        return m

    made = []
    with pytest.raises(RuntimeError, match="drafter broke"):
        Batch(env["lean"], broken, 3).run(prompts(4, seed=1), one_turn, 10, GREEDY, set())


@pytest.mark.parametrize("name", ["ar", "ngram", "suffix"])
def test_on_the_one_call_forward_a_batch_is_one_native_call_a_round(tiny_target_dir, name):
    """On int4 weights and the native kernels the shared forward is the model's one-call
    forward over every sequence's rows: still each sequence's batch-1 tokens, and a round's
    forwards merged (fewer forwards than the turns took alone)."""
    from engines.load import load

    eng, _ = load(
        str(tiny_target_dir), "cpu", engine="lean", weights="int4", dtype="float32",
        kernel="native_q8a",
    )  # fmt: skip
    assert eng.model.native_stack() is not None

    def make(target):
        ctx = make_ctx(eng)
        ctx.target = target
        m = build_method(method_config(name, tiny_knobs(name)), ctx)
        m.force_drafting(True)  # k=auto drafts every round: the drafts' rows go in the call
        return m

    convs = prompts(6, seed=8)
    want = [run(make(eng), c, n=16).output_ids for c in convs]
    out = Batch(eng, make, 3).run(convs, one_turn, 16, GREEDY, set())
    assert [out.turns[(i, 0)].output_ids for i in range(6)] == want
    assert out.forwards < sum(t.target_forwards for t in out.turns.values())
    assert sum(t.drafted_tokens for t in out.turns.values()) > 0 or name == "ar"


LEAN_NATIVE = ["engine=lean", "model.weights=int4", "model.kernel=native_q8a"]  # one-call forward


def cell_args(target, method, *extra):
    """A small cell on the tiny target's int4 weights and native kernels: the lean engine's
    one-call forward, every sequence's rows through each product together."""
    return [
        "model=hf", f"model.target={target}", "model.dtype=float32", "device=cpu",
        "task=core", "limit=2", "max_new_tokens=10", "repeats=2", "warmup=0", "remeasure=0",
        f"method={method}", *LEAN_NATIVE, *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("method", ["ngram", "ar"])
def test_a_batch_cell_runs_both_sides_at_b_and_reports_throughput(
    tiny_target_dir, tmp_path, method
):
    """`batch=3` on the lean engine's real batched forward: both sides decoded three at a
    time, interleaved batch run by batch run; the records carry the batch runs' figures and
    the batch-1 check, the method's tokens equal a batch=1 run's, and summary.csv has the
    aggregate throughput of each side, their ratio and rows per forward."""
    import json

    from conftest import compose

    from bench.run.runner import execute

    base = cell_args(tiny_target_dir, method)
    one, _, _ = execute(compose(base + [f"out={tmp_path / 'b1'}"]), tmp_path / "b1")
    three, path, runner = execute(
        compose(base + ["batch=3", f"out={tmp_path / 'b3'}"]), tmp_path / "b3"
    )
    assert runner.target.model.native_stack() is not None  # the one-call forward ran
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["batch"] for r in recs} == {3} and all(r["batch_wall_s"] > 0 for r in recs)
    assert {r["slot"] for r in recs} == {0, 1, 2}
    assert all(r["batch1_match"] is True and r["batch1_divergence"] is None for r in recs)
    assert {r["role"] for r in recs} == {"baseline", "method"}
    ids = {(r["prompt_id"], r["turn"], r["role"], r["repeat"]): r["output_ids"] for r in recs}
    first = [json.loads(x) for x in (tmp_path / "b1" / "records.jsonl").read_text().splitlines()]
    assert all(ids[(r["prompt_id"], r["turn"], r["role"], r["repeat"])] == r["output_ids"]
               for r in first)  # fmt: skip
    row = three[three.task == "all"].iloc[0]
    assert row.batch == 3 and row.batch_tokens_per_s > 0 and row.batch_baseline_tokens_per_s > 0
    assert row.batch_speedup == pytest.approx(
        row.batch_tokens_per_s / row.batch_baseline_tokens_per_s
    )
    assert row.rows_per_forward > 1 and row.speedup_exact is not None and row.exact_units > 0
    assert row.exact_match == 1 and row.batch_memory_overhead_mb >= 0
    for side in ("baseline", "method"):  # each batch run: fewer forwards than its turns took
        for rep in (0, 1):
            run = [r for r in recs if (r["role"], r["repeat"]) == (side, rep)]
            assert run[0]["batch_forwards"] < sum(r["target_forwards"] for r in run)
    assert one[one.task == "all"].iloc[0].batch == 1
    assert one[one.task == "all"].batch_speedup.isna().all()
    from bench.report.index import build

    index = build([tmp_path / "b1", tmp_path / "b3"], tmp_path / "report").read_text()
    assert "## Under load" in index and "### In-process batches (`batch=B`)" in index
    assert "[Under load](#under-load)" in index
    charts = list((tmp_path / "report").glob("batch__*.png"))
    assert len(charts) == 1
    rows = __import__("pandas").read_csv(tmp_path / "report" / "batches.csv")
    assert sorted(rows.batch) == [1, 3] and (rows.speedup > 0).all()


def test_a_shared_forward_bug_on_both_sides_fails_the_batch_1_check(
    tiny_target_dir, tmp_path, monkeypatch
):
    """A planted bug in the shared forward (every sequence's logits pushed toward one token)
    hits the method and ar at B alike, so method@B equals ar@B; the batch-1 check still finds
    every turn of both sides off its batch-1 tokens and exact_match counts it."""
    import json

    from conftest import compose

    from bench.run.runner import execute
    from engines.shared import Out, SharedForward

    honest = SharedForward._forward

    def planted(self, args):
        outs = honest(self, args)
        for o in outs:
            o.logits[..., 7] += 1e4  # every row's argmax becomes token 7
        return [Out(o.logits, o.hidden) for o in outs]

    monkeypatch.setattr(SharedForward, "_forward", planted)
    args = cell_args(tiny_target_dir, "ngram", "batch=2", "repeats=1", f"out={tmp_path}")
    summary, path, _ = execute(compose(args), tmp_path)
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(r["output_ids"] == [7] * len(r["output_ids"]) for r in recs)  # the bug ran
    method = [r for r in recs if r["role"] == "method" and r["turn"] == 0]
    assert method and all(r["verdict"] == "mismatch" for r in method)
    assert all(r["batch1_match"] is False for r in recs if r["turn"] == 0)
    assert all(r["batch1_divergence"] == 0 for r in recs if r["turn"] == 0)
    row = summary[summary.task == "all"].iloc[0]
    assert row.exact_match == 0 and row.mismatches > 0


def test_a_sequence_in_a_batch_prices_its_rows_on_the_batch_forward():
    """k=auto at batch=B plans on engines.probe.in_batch: its share of a plain round and what
    its extra rows add to the shared forward; with it a draft pays exactly when it raises the
    whole batch's tokens per second (this sequence drafting, the others plain)."""
    from engines.probe import in_batch, interpolate

    costs = {1: 4.0, 2: 4.2, 4: 4.6, 8: 6.8, 12: 10.0, 16: 12.8}
    assert in_batch(costs, 1) == costs
    c = in_batch(costs, 4)
    assert c[1] == pytest.approx(4.6 / 4)
    assert c[2] == pytest.approx(4.6 / 4 + interpolate(costs, 5) - 4.6)
    for n, extra in [(1, 0.3), (1, 0.1), (3, 0.8), (3, 0.3), (7, 2.0), (7, 3.5)]:
        batch_gains = (4 + extra) / interpolate(costs, 4 + n) > 4 / 4.6
        sequence_gains = (1 + extra) / c[n + 1] > 1 / c[1]
        assert batch_gains == sequence_gains, (n, extra)
    assert in_batch(costs, 8)[2] - in_batch(costs, 8)[1] > c[2] - c[1]  # rows dearer at 8


def test_a_round_prices_each_sequences_rows_on_top_of_the_rows_before_it():
    """engines.probe.BatchCurve: with the others plain it is in_batch's curve; after sequences
    before it in the round drafted, a sequence's rows cost what they add on top of theirs, so
    past the sizes a forward reads its weights for, the same acceptance drafts less (a greedy
    joint choice of the round's draft lengths)."""
    from engines.probe import BatchCurve, in_batch
    from methods.auto.chain import best_chain
    from methods.auto.costs import Costs

    curve = {1: 4.0, 2: 4.2, 4: 4.6, 8: 6.8, 12: 10.0, 16: 12.8}
    others = [3]
    bc = BatchCurve(curve, 4, lambda: others[0])
    assert dict(bc) == in_batch(curve, 4)
    assert all(bc.verify(q) == pytest.approx(bc[q]) for q in curve)
    costs = Costs(bc)
    alphas = [0.5] * 6
    k_plain_others = best_chain(alphas, costs, 6, 0)
    two_rows = costs.verify(3) - costs.verify(1)
    others[0] = 9  # the sequences before it drafted 6 rows more
    assert costs.verify(1) == pytest.approx(bc[1])  # a plain round still costs its share
    assert costs.verify(3) - costs.verify(1) > two_rows
    assert best_chain(alphas, costs, 6, 0) < k_plain_others == 1


def test_a_seat_counts_the_rows_the_others_put_in_the_coming_forward(env):
    """Seat.others_rows: the rows the seats before it in the round asked for, and one for each
    seat after it (not yet drafted), read as it drafts; a seat that leaves takes its rows."""
    from engines.shared import SharedForward

    eng = env["lean"]
    shared = SharedForward(eng)
    seen = {}

    def work(b, item):
        cache = eng.new_cache(16)
        for r in range(2):
            seen[(b, r)] = shared.seat(b).others_rows()
            ids = torch.arange(1 + b + r * (b + 1))[None] + 3  # seat b asks 1 + b (+ b + 1) rows
            shared.seat(b).forward(ids, cache)

    shared.map(work, [0, 1, 2], 3)
    # round 0: seat 0 sees seats 1, 2 plain; seat 1: seat 0's 1 row + seat 2; seat 2: 1 + 2
    assert [seen[(b, 0)] for b in range(3)] == [2, 2, 3]
    assert [seen[(b, 1)] for b in range(3)] == [2, 2 + 1, 2 + 4]
    assert shared.asked_rows == 0


def test_a_batch_line_holds_one_prompt_set():
    """The report's batch lines: a B = 1 cell of the method joins only when it decoded the
    prompts and budgets its B > 1 cells did; another prompt set's cells are named, not drawn."""
    import pandas as pd

    from bench.report.batch import batch_rows, left_off

    same, other = "core, 2 prompts/task, 10 new tokens", "core, 2 prompts/task, 64 new tokens"
    cells = pd.DataFrame(
        [(f"r{i}", "all", "g", "ngram", 3, False, b, ps, 100.0 + b, 80.0, 90.0 * b, 70.0 * b)
         for i, (b, ps) in enumerate([(1, same), (1, other), (2, same), (4, same)])],
        columns=["run", "task", "group", "method", "k", "k_auto", "batch", "prompt_set",
                 "tokens_per_s", "baseline_tokens_per_s", "batch_tokens_per_s",
                 "batch_baseline_tokens_per_s"],
    )  # fmt: skip
    rows = batch_rows(cells)
    assert list(rows.batch) == [1, 2, 4] and set(rows.prompt_set) == {same}
    assert rows[rows.batch == 1].tokens_per_s.item() == 101.0  # the B = 1 cell's own figure
    assert left_off(cells) == [f"ngram B=1 ({other})"]


def test_a_sampled_batch_cell_leaves_the_batch_1_check_empty(tiny_target_dir, tmp_path):
    """At T > 0 a batch's draws come from one generator, not the batch-1 ones: no batch-1 run,
    `batch1_match` empty on every record, and the cell still completes."""
    import json

    from conftest import compose

    from bench.run.runner import execute

    args = cell_args(tiny_target_dir, "ngram", "batch=2", "repeats=1", "temperature=1",
                     f"out={tmp_path}")  # fmt: skip
    _, path, _ = execute(compose(args), tmp_path)
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert recs and all(r["batch1_match"] is None and r["verdict"] is None for r in recs)
