"""Distillation ids and the hidden states rebuilt from them (train/distill.py, states.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import TINY_DISTILL

from engines.load import load
from groundfloor.errors import UserError
from train import distill, states

HOW = TINY_DISTILL  # the tiny model answers and is read as training reads it
LAYERS = [1, -1]


def ten_rows() -> list[dict]:
    """Ten short prompts, every third with a second turn."""
    words = "write a short poem about the sea and explain the answer step by step".split()
    return [
        {
            "question_id": f"t{i}",
            "category": "general",
            "turns": [" ".join(words[i % 5 : i % 5 + 6])] + (["and more"] if i % 3 == 0 else []),
        }
        for i in range(10)
    ]


@pytest.fixture(scope="module")
def engine(tiny_target_dir):
    eng, _ = load(
        str(tiny_target_dir),
        "cpu",
        engine="lean",
        weights="float32",
        dtype="float32",
        kernel="aten",
    )
    return eng


def prompts():
    g = torch.Generator().manual_seed(3)
    return [torch.randint(3, 120, (n,), generator=g).tolist() for n in (5, 9, 14, 7)]


def test_rebuilt_states_match_the_decode(engine):
    """The states a drafter trains on, recomputed by a teacher-forced forward over the ids, are
    the decode's own: within 1e-3 in float32 terms, and after bfloat16 storage at most one
    bfloat16 step apart (a float difference may round either way)."""
    decoded = distill.decode_batch(
        engine, prompts(), 12, [0.0, 1.0, 0.0, 1.0], LAYERS, {2}, torch.Generator().manual_seed(0)
    )
    rebuilt = states.teacher_forced(engine, [d["ids"] for d in decoded], LAYERS)
    for d, r in zip(decoded, rebuilt):
        for layer in LAYERS:
            a, b = d["hidden"][layer].float(), r[layer].float()
            assert a.shape == b.shape == (len(d["ids"]), engine.config.hidden_size)
            step = torch.maximum(a.abs(), b.abs()) * 2.0**-7  # one bf16 ulp at that size
            assert ((a - b).abs() <= torch.maximum(step, torch.tensor(1e-3))).all(), layer


def test_finished_rows_leave_the_batch_without_changing_answers(engine):
    """Dropping ended rows from the cache (the build's path, no states) changes no greedy answer
    against keeping every row to the end (the states path)."""
    free = distill.decode_batch(engine, prompts(), 16, [0.0] * 4, [], set())
    eos = {int(free[0]["ids"][free[0]["start"] + 3])}  # a token one row emits early
    a = distill.decode_batch(engine, prompts(), 16, [0.0] * 4, [], eos)
    b = distill.decode_batch(engine, prompts(), 16, [0.0] * 4, LAYERS, eos)
    assert [x["ids"].tolist() for x in a] == [x["ids"].tolist() for x in b]
    lengths = {len(x["ids"]) - x["start"] for x in a}
    assert len(lengths) > 1  # some rows did end early, so the drop was exercised


def test_id_shards_round_trip_and_resume(tiny_target_dir, tmp_path, monkeypatch):
    """Shards are compressed uint16 files with every record; a finished shard is not redone,
    a shard written for a smaller `limit` is, and the states come back from the local cache."""
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(distill, "SHARD", 4)
    rows = ten_rows()
    how = {**HOW, "ids_dir": str(tmp_path / "repo")}
    folder, shards = distill.build_ids(str(tiny_target_dir), rows[:6], 10, how, batch=3)
    assert [f.name for f in shards] == ["shard-0000.npz", "shard-0001.npz"]
    assert np.load(shards[0])["tokens"].dtype == np.uint16
    first = distill.load_ids(shards[0])
    assert {r["turn"] for r in first} == {0, 1} and len(first) == 4 + 2  # t0 and t3 have turn 2
    before = shards[0].stat().st_mtime_ns
    folder2, shards2 = distill.build_ids(str(tiny_target_dir), rows, 10, how, batch=3)
    assert folder2 == folder and len(shards2) == 3
    assert shards2[0].stat().st_mtime_ns == before  # kept
    assert distill._prompts_in(shards2[1]) == 4  # the 2-prompt shard of limit 6 was redone
    changed = rows[:5] + [{**rows[5], "question_id": "t5-renamed"}] + rows[6:]  # in shard 1
    with pytest.raises(UserError, match="shard-0001.npz answers other prompts than shard 1"):
        distill.build_ids(str(tiny_target_dir), changed, 10, how, batch=3)
    seqs = distill.build(str(tiny_target_dir), rows, 10, LAYERS, how, batch=3)
    monkeypatch.setattr(states, "teacher_forced", lambda *a: pytest.fail("recomputed"))
    again = distill.build(str(tiny_target_dir), rows, 10, LAYERS, how, batch=3)
    assert all(torch.equal(a["hidden"][-1], b["hidden"][-1]) for a, b in zip(seqs, again))
    assert all(a["hidden"][1].shape[0] == len(a["ids"]) for a in again)
    # the states of another engine than the answers' (the target as benchmarked): the same ids,
    # states of their own, cached beside the others
    monkeypatch.undo()
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(distill, "SHARD", 4)
    q8a = {"weights": "int4", "kernel": "native_q8a"}
    other = distill.build(str(tiny_target_dir), rows, 10, LAYERS, how, 3, states_engine=q8a)
    assert [a["ids"].tolist() for a in other] == [a["ids"].tolist() for a in seqs]
    assert any(not torch.equal(a["hidden"][-1], b["hidden"][-1]) for a, b in zip(seqs, other))
    eng, _ = load(str(tiny_target_dir), "cpu", engine="lean", dtype="float32", **q8a)
    alone = states.teacher_forced(eng, [other[0]["ids"]], LAYERS)[0]
    assert torch.equal(alone[-1], other[0]["hidden"][-1])
    assert len(list((tmp_path / "cache" / "distill" / folder.name).glob("states-*"))) == 2


def test_a_turn_repeated_inside_the_next_one_is_cut_from_its_states(engine, tmp_path, monkeypatch):
    """Turn 1's ids begin turn 2's: its states are sliced from turn 2's forward, equal to its own
    forward's within the float tolerance of another batch shape; a record that is not a prefix
    (retokenized differently) is forwarded itself."""
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path))
    g = torch.Generator().manual_seed(4)
    first = torch.randint(3, 120, (11,), generator=g)
    second = torch.cat([first, torch.randint(3, 120, (6,), generator=g)])
    other = torch.randint(3, 120, (9,), generator=g)
    changed = torch.cat([other[:-1] + 1, torch.randint(3, 120, (5,), generator=g)])
    recs = [
        {"id": "a", "ids": first, "turn": 0},
        {"id": "a/turn2", "ids": second, "turn": 1},
        {"id": "b", "ids": other, "turn": 0},
        {"id": "b/turn2", "ids": changed, "turn": 1},
    ]
    assert states.prefix_hosts(recs) == {0: 1}
    assert states.prefix_hosts(
        recs + [{"id": "a/turn3", "ids": torch.cat([second, first]), "turn": 2}]
    ) == {0: 4, 1: 4}
    shard = tmp_path / "shard-0000.npz"
    np.savez(shard, lengths=np.array([len(r["ids"]) for r in recs]))
    seen = []
    real = states.teacher_forced
    monkeypatch.setattr(
        states, "teacher_forced", lambda e, seqs, l: seen.extend(seqs) or real(e, seqs, l)
    )
    monkeypatch.setattr("engines.load.load", lambda *a, **k: (engine, {}))
    out = states.with_states("tiny", "k", [shard], [dict(r) for r in recs], LAYERS, HOW)
    assert not any(s is first for s in seen) and len(seen) == 3
    alone = real(engine, [first], LAYERS)[0]
    for layer in LAYERS:
        a, b = out[0]["hidden"][layer].float(), alone[layer].float()
        assert a.shape == b.shape
        assert ((a - b).abs() <= torch.maximum(a.abs() * 2.0**-7, torch.tensor(1e-3))).all()


def test_draw_samples_each_rows_distribution():
    """distill._draw: greedy rows take the argmax; sampling rows draw from softmax(logits / T)
    (a chi-square test per row over 20,000 draws, the rows drawn together)."""
    from scipy.stats import chisquare

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.5, 3.0, 0.2], [1.0, 1.0, 1.0, 1.0]])
    hot = torch.tensor([True, False, True])
    temp = torch.tensor([0.7, 1.0, 1.0])
    g = torch.Generator().manual_seed(11)
    n = 20_000
    draws = torch.stack([distill._draw(logits, hot, temp, g) for _ in range(n)])  # (n, rows)
    assert (draws[:, 1] == 2).all()  # greedy
    for r in (0, 2):
        p = torch.softmax(logits[r] / temp[r], -1)
        seen = torch.bincount(draws[:, r], minlength=4).numpy()
        assert chisquare(seen, (p * n).numpy()).pvalue > 1e-3, (r, seen)


def test_one_call_engines_decode_each_prompt_as_alone(tiny_target_dir):
    """On the one-call forward, decode_batch keeps each prompt in a cache of its own
    (decode_seqs): every greedy answer is token for token the batch-1 decode's, rows that end
    leave, and with states kept each row's states are its own forward's taps."""
    eng, _ = load(
        str(tiny_target_dir), "cpu", engine="lean", weights="int4", dtype="float32",
        kernel="native_q8a",
    )  # fmt: skip
    assert distill.one_call(eng)
    free = distill.decode_batch(eng, prompts(), 12, [0.0] * 4, [], set())
    eos = {int(free[0]["ids"][free[0]["start"] + 3])}
    got = distill.decode_batch(eng, prompts(), 12, [0.0] * 4, LAYERS, eos)
    assert len({len(x["ids"]) - x["start"] for x in got}) > 1  # a row ended early
    for p, x in zip(prompts(), got):
        cache = eng.new_cache(len(x["ids"]) + 1)
        with torch.inference_mode():
            out = eng.forward(torch.tensor([p]), cache, logits_to_keep=1, hidden=tuple(LAYERS))
            taps = [out.hidden]
            answer = []
            for _ in range(12):
                t = int(out.logits[0, -1].argmax())
                answer.append(t)
                out = eng.forward(
                    torch.tensor([[t]]), cache, logits_to_keep=1, hidden=tuple(LAYERS)
                )
                taps.append(out.hidden)
                if t in eos:
                    break
        assert x["ids"].tolist() == p + answer
        for layer in LAYERS:
            alone = torch.cat([h[layer][0] for h in taps]).to(torch.bfloat16)
            assert torch.equal(x["hidden"][layer], alone), layer
    # the states rebuilt by a teacher-forced forward are the decode's, bit for bit
    rebuilt = states.teacher_forced(eng, [x["ids"] for x in got], LAYERS)
    for x, r in zip(got, rebuilt):
        for layer in LAYERS:
            assert torch.equal(x["hidden"][layer], r[layer]), layer


def test_states_on_the_fly_are_the_up_front_ones_written_once(
    tiny_target_dir, tmp_path, monkeypatch
):
    """With lazy=True (training's path) no state is computed before a record's are read; then
    its shard's, and only its, are computed and written, and the files hold the bits the up-front
    build writes. A second read, and a later run, map them: each shard is computed once. The
    global RNG is left as it was (the head's draws are a cached run's)."""
    monkeypatch.setattr(distill, "SHARD", 4)
    rows = ten_rows()
    how = {**HOW, "ids_dir": str(tmp_path / "repo")}
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path / "up"))
    up = distill.build(str(tiny_target_dir), rows, 10, LAYERS, how, batch=3)
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path / "fly"))
    computed = []
    real = states._shard_states
    monkeypatch.setattr(
        states, "_shard_states", lambda e, recs, l: computed.append(recs) or real(e, recs, l)
    )
    fly = distill.build(str(tiny_target_dir), rows, 10, LAYERS, how, batch=3, lazy=True)
    folder = next((tmp_path / "fly" / "distill").glob("*/states-*"))
    assert computed == [] and not list(folder.iterdir())  # nothing before training reads
    assert all(set(x["hidden"]) == set(LAYERS) and 1 in x["hidden"] for x in fly)
    assert computed == []  # the layers are known without computing them
    sizes = [len(distill.load_ids(f)) for f in sorted((tmp_path / "repo").glob("*/shard-*"))]
    rng = torch.get_rng_state()
    last = fly[-1]["hidden"][-1]  # a record of the last shard: that shard alone
    assert torch.equal(torch.get_rng_state(), rng)
    assert len(computed) == 1 and computed[0][-1] is fly[-1]
    assert sorted(f.name for f in folder.iterdir()) == ["shard-0002.h-1.pt", "shard-0002.h1.pt"]
    assert torch.equal(last, up[-1]["hidden"][-1])
    for a, b in zip(fly, up):  # every shard as the up-front build has it, bit for bit
        for layer in LAYERS:
            assert a["hidden"][layer].dtype == torch.bfloat16
            assert torch.equal(a["hidden"][layer], b["hidden"][layer]), (a["id"], layer)
    assert [len(c) for c in computed] == [sizes[2], sizes[0], sizes[1]]  # in order of need
    up_folder = next((tmp_path / "up" / "distill").glob("*/states-*"))
    assert sorted(f.name for f in folder.iterdir()) == sorted(f.name for f in up_folder.iterdir())
    for f in folder.iterdir():  # the files themselves: the same tensors
        for a, b in zip(torch.load(f), torch.load(up_folder / f.name)):
            assert torch.equal(a, b), f.name
    for x in fly:  # a second pass reads the cache
        x["hidden"][1].sum()
    again = distill.build(str(tiny_target_dir), rows, 10, LAYERS, how, batch=3, lazy=True)
    assert all(torch.equal(a["hidden"][1], b["hidden"][1]) for a, b in zip(again, up))
    assert len(computed) == 3  # each shard computed once, in the first pass
