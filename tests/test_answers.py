"""Answer files in Spec-Bench's format: the fields its scripts read, written from our records;
evaluation/speed.py's arithmetic on them equal to our `speedup_specbench` and its mean accepted
tokens to our `tau_round`, on hand-written files and on a real run's."""

from __future__ import annotations

import json
from itertools import chain
from types import SimpleNamespace

import pandas as pd
import pytest

from bench.outputs.acceptance import tau_round_of
from bench.outputs.answers import (
    answer_lines,
    answer_text,
    file_name,
    recount,
    step_lengths,
    write_answers,
)
from bench.outputs.metrics import specbench_speedup
from tasks.specbench import MT_BENCH

EOS = 0


class WordTokenizer:
    """Token i is the word `wi`; EOS (0) is special, left out by decode; encoding adds a BOS."""

    def decode(self, ids, skip_special_tokens=False):
        return " " + " ".join(f"w{i}" for i in ids if not (skip_special_tokens and i == EOS)) + " "

    def __call__(self, text):
        return SimpleNamespace(input_ids=[1] + [int(w[1:]) for w in text.split()])


def speed_py(method_lines, base_lines, tokenizer, task="overall"):
    """evaluation/speed.py's `speed()` on two answer files (Spec-Bench at fd2c1cd): each file's
    lines filtered by category (overall: all; mt_bench: MT-Bench's eight); per line, the method's
    Σ new_tokens ÷ Σ wall_time of choices[0], the baseline's tokens recounted from its turns'
    text as len(tokenizer(text).input_ids) − 1 each; → (mean of the method's ÷ mean of the
    baseline's, the mean of every accept length of the method's lines pooled)."""

    def keep(lines):
        if task == "overall":
            return lines
        cats = MT_BENCH if task == "mt_bench" else (task,)
        return [a for a in lines if a["category"] in cats]

    m = [c["choices"][0] for c in keep(method_lines)]
    b = [c["choices"][0] for c in keep(base_lines)]
    speeds = [sum(c["new_tokens"]) / sum(c["wall_time"]) for c in m]
    recounted = [sum(len(tokenizer(t).input_ids) - 1 for t in c["turns"]) for c in b]
    speeds0 = [n / sum(c["wall_time"]) for n, c in zip(recounted, b)]
    accepts = list(chain.from_iterable(c["accept_lengths"] for c in m))
    assert all(isinstance(x, int) for x in accepts)  # a nested list would break its np.mean
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return mean(speeds) / mean(speeds0), mean(accepts)


def rec(pid, turn, role, ids, rounds, wall, repeat=0, category="dialog", sub="writing"):
    """One record as bench.decode.loop writes it: the prefill's token, then per round its accepted
    drafts `rounds` (a_r) plus the target's own token, the last round cut to the emitted ids."""
    emitted = [1] + [a + 1 for a in rounds]
    emitted[-1] -= sum(emitted) - len(ids)  # a round cut at the token budget or EOS
    words = answer_text(WordTokenizer(), list(ids))
    return {
        "task": "t",
        "category": category,
        "subcategory": sub,
        "prompt_id": pid,
        "turn": turn,
        "role": role,
        "repeat": repeat,
        "method": "ngram",
        "output_ids": list(ids),
        "new_tokens": len(ids),
        "recount_tokens": recount(WordTokenizer(), words),  # as bench.run.runner records it
        "target_forwards": 1 + len(rounds),
        "wall_s": wall,
        "accept_lengths": emitted,
        "round_accepted": list(rounds),
    }


SEVEN, EIGHT_NINE_EOS, FOUR = (1, 2, 3, 4, 5, 6, 7), (8, 9, EOS), (1, 2, 3, 4)
RECORDS = [
    # q81, two turns. Method turn 0: prefill 1 + rounds (2+1, 0+1, 1+1) = 7 tokens in 0.5 s
    rec("81", 1, "method", EIGHT_NINE_EOS, [1], 0.25),  # turn order shuffled in the file
    rec("81", 0, "method", SEVEN, [2, 0, 1], 0.5),
    rec("81", 0, "method", SEVEN, [2, 0, 1], 5.0, repeat=1),  # repeat 1: in no answer file
    rec("81", 0, "baseline", SEVEN, [0] * 6, 1.0),
    rec("81", 1, "baseline", EIGHT_NINE_EOS, [0, 0], 0.5),
    rec("81", 0, "baseline", SEVEN, [0] * 6, 0.1, repeat=1),
    # q007: its one round accepted 4 drafts, of which the token budget kept 3
    rec("reasoning-007", 0, "method", FOUR, [4], 0.5, category="reasoning", sub="math"),
    rec("reasoning-007", 0, "baseline", FOUR, [0] * 3, 0.8, category="reasoning", sub="math"),
]
# The two files by hand (answer_id, model_id and tstamp aside). A step counts the previous
# forward's token with the drafts it accepted: 1 + a_r per round (1 + 4 = 5 for the cut round).
METHOD_FILE = [
    {
        "question_id": 81,
        "category": "writing",
        "choices": [
            {
                "index": 0,
                "turns": ["w1 w2 w3 w4 w5 w6 w7", "w8 w9"],
                "decoding_steps": [3, 1],
                "new_tokens": [7, 3],
                "wall_time": [0.5, 0.25],
                "accept_lengths": [3, 1, 2, 2],
            }
        ],
    },
    {
        "question_id": "reasoning-007",
        "category": "math_reasoning",
        "choices": [
            {
                "index": 0,
                "turns": ["w1 w2 w3 w4"],
                "decoding_steps": [1],
                "new_tokens": [4],
                "wall_time": [0.5],
                "accept_lengths": [5],
            }
        ],
    },
]
BASE_FILE = [
    {
        "question_id": 81,
        "category": "writing",
        "choices": [
            {
                "index": 0,
                "turns": ["w1 w2 w3 w4 w5 w6 w7", "w8 w9"],
                "decoding_steps": [6, 2],
                "new_tokens": [7, 3],
                "wall_time": [1.0, 0.5],
                "accept_lengths": [1] * 8,
            }
        ],
    },
    {
        "question_id": "reasoning-007",
        "category": "math_reasoning",
        "choices": [
            {
                "index": 0,
                "turns": ["w1 w2 w3 w4"],
                "decoding_steps": [3],
                "new_tokens": [4],
                "wall_time": [0.8],
                "accept_lengths": [1, 1, 1],
            }
        ],
    },
]
# speed.py on them, by hand:
#   method   q81 (7 + 3) / (0.5 + 0.25) = 40/3, q007 4 / 0.5 = 8        → mean 32/3
#   baseline recounted: q81 "w1 … w7" 8 ids − 1 = 7, "w8 w9" (EOS not in the text) 3 − 1 = 2,
#            so (7 + 2) / (1.0 + 0.5) = 6; q007 (5 − 1) / 0.8 = 5       → mean 11/2
#   speedup (32/3) / (11/2) = 64/33 ≈ 1.939
#   mean accepted tokens (3 + 1 + 2 + 2 + 5) / 5 = 13/5 = τ_round = 1 + (2 + 0 + 1 + 1 + 4) / 5
SPEEDUP, MEAN_ACCEPTED = 64 / 33, 13 / 5


def read_back(paths):
    drop = ("answer_id", "model_id", "tstamp")
    return {
        role: [{k: v for k, v in json.loads(line).items() if k not in drop} for line in open(p)]
        for role, p in paths.items()
    }


def test_hand_written_files_and_speed_py_on_them():
    tok = WordTokenizer()
    assert speed_py(METHOD_FILE, BASE_FILE, tok) == pytest.approx((SPEEDUP, MEAN_ACCEPTED))
    df = pd.DataFrame(RECORDS)
    method, base = df[df.role == "method"], df[df.role == "baseline"]
    assert specbench_speedup(method, base) == pytest.approx(SPEEDUP)
    assert tau_round_of(method[method.repeat == 0]) == pytest.approx(MEAN_ACCEPTED)


def test_written_files_are_the_hand_written_ones(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    paths = write_answers(tmp_path, path, WordTokenizer(), "m")
    assert paths == {
        "baseline": tmp_path / "answers" / "ar.jsonl",
        "method": tmp_path / "answers" / "ngram.jsonl",
    }
    read = read_back(paths)
    assert read["method"] == METHOD_FILE and read["baseline"] == BASE_FILE
    line = json.loads(open(paths["method"]).readline())
    assert line["model_id"] == "m-ngram" and line["answer_id"] and line["tstamp"]
    assert file_name("method", "ar") == "ar-method.jsonl"  # an ar-vs-ar run keeps both files


def test_step_lengths_of_each_kind_of_record():
    loop = RECORDS[1]
    assert step_lengths(loop) == [3, 1, 2]  # 1 + a_r; the prefill's token opens step 1
    assert step_lengths(RECORDS[6]) == [5]  # a round cut by the budget counts what it accepted
    # transformers' generate() (bench.decode.wholeturn) verifies a first draft in the prefill
    # forward and records no rounds apart from it: each forward with what it emitted
    # (Spec-Bench's PLD)
    whole = dict(loop, accept_lengths=[3, 1, 3], round_accepted=[])
    assert step_lengths(whole) == [3, 1, 3]
    server = dict(loop, accept_lengths=[], round_accepted=None, target_forwards=None)
    assert step_lengths(server) == []
    [line] = answer_lines([dict(server, turn=0)], "method", WordTokenizer(), "m")
    assert line["choices"][0]["decoding_steps"] == [None]


def test_rerun_into_the_same_directory_keeps_the_latest_records():
    rerun = [dict(r, output_ids=[4]) for r in RECORDS]
    lines = answer_lines(RECORDS + rerun, "method", WordTokenizer(), "m")
    assert lines[0]["choices"][0]["turns"] == ["w4", "w4"]
    failed = [dict(r, error="timeout") if r["turn"] == 1 else r for r in RECORDS]
    lines = answer_lines(failed, "method", WordTokenizer(), "m")
    assert lines[0]["choices"][0]["turns"] == ["w1 w2 w3 w4 w5 w6 w7"]  # no answer, no turn


def test_a_real_runs_files_give_its_summary_through_speed_py(tiny_target_dir, tmp_path):
    """question.jsonl → python -m bench task=jsonl → answers with the same ids, Spec-Bench
    categories (MT-Bench's `reasoning` is not our math) and turns decoded from repeat 0's ids;
    speed.py's arithmetic on them gives summary.csv's speedup_specbench and tau_round, overall
    and per category."""
    from helpers import bench
    from transformers import AutoTokenizer

    cats = ("writing", "reasoning", "math_reasoning", "rag")
    rows = [
        {
            "question_id": 81 + 10 * i,
            "category": c,
            "turns": ["write a short poem about the sea"]
            + (["now make it rhyme"] if c in MT_BENCH else []),
        }
        for i, c in enumerate(cats)
    ]
    q = tmp_path / "question.jsonl"
    q.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    p = bench(
        "method=ngram",
        "model=hf",
        f"model.target={tiny_target_dir}",
        "model.dtype=float32",
        "device=cpu",
        "task=jsonl",
        f"task.path={q}",
        "max_new_tokens=12",
        "repeats=2",
        "warmup=0",
        "remeasure=0",
        f"out={out}",
    )
    assert p.returncode == 0, p.stderr
    tok = AutoTokenizer.from_pretrained(tiny_target_dir)
    records = [json.loads(line) for line in open(out / "records.jsonl")]
    read = {}
    for name, role in (("ar.jsonl", "baseline"), ("ngram.jsonl", "method")):
        answers = read[role] = [json.loads(line) for line in open(out / "answers" / name)]
        assert [a["question_id"] for a in answers] == [r["question_id"] for r in rows]
        assert [a["category"] for a in answers] == list(cats)
        for a, r in zip(answers, rows):
            c = a["choices"][0]
            assert len(c["turns"]) == len(c["new_tokens"]) == len(r["turns"])
            assert len(c["accept_lengths"]) == sum(c["decoding_steps"])
            mine = sorted(
                (
                    x
                    for x in records
                    if x["prompt_id"] == str(r["question_id"])
                    and x["role"] == role
                    and x["repeat"] == 0
                ),
                key=lambda x: x["turn"],
            )
            assert c["turns"] == [answer_text(tok, x["output_ids"]) for x in mine]
            assert c["new_tokens"] == [x["new_tokens"] for x in mine]
            assert c["decoding_steps"] == [x["target_forwards"] - 1 for x in mine]
    summary = pd.read_csv(out / "summary.csv").set_index("category")
    # our categories against speed.py's task filter (dialog: its mt_bench group)
    for ours, theirs in (
        ("all", "overall"),
        ("dialog", "mt_bench"),
        ("reasoning", "math_reasoning"),
    ):
        speedup, accepted = speed_py(read["method"], read["baseline"], tok, task=theirs)
        assert speedup == pytest.approx(summary.loc[ours, "speedup_specbench"], rel=1e-9)
        assert accepted == pytest.approx(summary.loc[ours, "tau_round"], rel=1e-9)
