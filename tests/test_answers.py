"""Answer files in Spec-Bench's format: the fields its scripts read, from our records, and a
Spec-Bench question file going through a real run back to answers with its ids and categories."""

from __future__ import annotations

import json
from itertools import chain

import pytest

from bench.answers import answer_lines, file_name, write_answers
from tasks.specbench import MT_BENCH


class WordTokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return " " + " ".join(f"w{i}" for i in ids) + " "


def rec(
    pid,
    turn,
    role,
    repeat=0,
    category="dialog",
    sub="writing",
    ids=(1, 2, 3),
    accept=(1, 2),
    forwards=2,
    wall=0.5,
):
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
        "target_forwards": forwards,
        "wall_s": wall,
        "accept_lengths": list(accept),
    }


RECORDS = [
    rec("81", 1, "method", ids=(7,), accept=(1,), forwards=1, wall=0.25),  # turn order shuffled
    rec("81", 0, "method"),
    rec("81", 0, "method", repeat=1, ids=(9, 9)),  # repeat 1: not written
    rec("81", 0, "baseline", accept=(1, 1, 1), forwards=3),
    rec("81", 1, "baseline", ids=(5,), accept=(1,), forwards=1),
    rec("reasoning-007", 0, "method", category="reasoning", sub="math"),
    rec("reasoning-007", 0, "baseline", category="reasoning", sub="math"),
]


def test_answer_lines_hold_what_specbench_reads():
    lines = answer_lines(RECORDS, "method", WordTokenizer(), "m-ngram", tstamp=1.0)
    assert [a["question_id"] for a in lines] == [81, "reasoning-007"]
    assert [a["category"] for a in lines] == ["writing", "math_reasoning"]
    a = lines[0]
    assert a["model_id"] == "m-ngram" and a["tstamp"] == 1.0 and a["answer_id"]
    [c] = a["choices"]
    assert c["index"] == 0 and c["turns"] == ["w1 w2 w3", "w7"]
    assert c["new_tokens"] == [3, 1] and c["decoding_steps"] == [2, 1]
    assert c["wall_time"] == [0.5, 0.25]
    assert c["accept_lengths"] == [1, 2, 1]  # one flat list over the turns, as Spec-Bench writes
    base = answer_lines(RECORDS, "baseline", WordTokenizer(), "m-ar")
    assert base[0]["choices"][0]["accept_lengths"] == [1, 1, 1, 1]


def test_rerun_into_the_same_directory_keeps_the_latest_records():
    rerun = [dict(r, output_ids=[4]) for r in RECORDS]
    lines = answer_lines(RECORDS + rerun, "method", WordTokenizer(), "m")
    assert lines[0]["choices"][0]["turns"] == ["w4", "w4"]


def specbench_speed(method_lines, base_lines):
    """What Spec-Bench's evaluation/speed.py computes from two answer files (its contract):
    mean over questions of Σ new_tokens ÷ Σ wall_time, and the mean of all accept lengths."""

    def tps(lines):
        return [
            sum(a["choices"][0]["new_tokens"]) / sum(a["choices"][0]["wall_time"]) for a in lines
        ]

    accepts = list(chain.from_iterable(a["choices"][0]["accept_lengths"] for a in method_lines))
    assert all(isinstance(x, int) for x in accepts)  # a nested list would break its np.mean
    m, b = tps(method_lines), tps(base_lines)
    return (sum(m) / len(m)) / (sum(b) / len(b)), sum(accepts) / len(accepts)


def test_written_files_read_like_specbench(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    paths = write_answers(tmp_path, path, WordTokenizer(), "m")
    assert paths["baseline"] == tmp_path / "answers" / "ar.jsonl"
    assert paths["method"] == tmp_path / "answers" / "ngram.jsonl"
    read = {k: [json.loads(line) for line in open(p)] for k, p in paths.items()}
    assert read["method"][0]["model_id"] == "m-ngram" and read["baseline"][0]["model_id"] == "m-ar"
    speedup, tau = specbench_speed(read["method"], read["baseline"])
    assert tau == (1 + 2 + 1 + 1 + 2) / 5
    # method: q81 4 tokens in 0.75 s, q007 3 in 0.5 s; baseline: 4 in 1.0 s, 3 in 0.5 s
    assert speedup == pytest.approx(((4 / 0.75 + 3 / 0.5) / 2) / ((4 / 1.0 + 3 / 0.5) / 2))
    assert file_name("method", "ar") == "ar-method.jsonl"  # an ar-vs-ar run keeps both files


def test_specbench_questions_round_trip_through_a_run(tiny_target_dir, tmp_path):
    """question.jsonl → python -m bench task=jsonl → answers with the same ids, Spec-Bench
    categories (MT-Bench's `reasoning` is not our math) and turns decoded from the recorded ids."""
    from test_cli import bench
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
        "max_new_tokens=6",
        "repeats=1",
        "warmup=0",
        "remeasure=0",
        f"out={out}",
    )
    assert p.returncode == 0, p.stderr
    tok = AutoTokenizer.from_pretrained(tiny_target_dir)
    records = [json.loads(line) for line in open(out / "records.jsonl")]
    for name, role in (("ar.jsonl", "baseline"), ("ngram.jsonl", "method")):
        answers = [json.loads(line) for line in open(out / "answers" / name)]
        assert [a["question_id"] for a in answers] == [r["question_id"] for r in rows]
        assert [a["category"] for a in answers] == list(cats)
        for a, r in zip(answers, rows):
            c = a["choices"][0]
            assert len(c["turns"]) == len(c["new_tokens"]) == len(r["turns"])
            assert len(c["accept_lengths"]) == sum(c["decoding_steps"])
            assert sum(c["accept_lengths"]) == sum(c["new_tokens"])
            mine = sorted(
                (
                    x
                    for x in records
                    if x["prompt_id"] == str(r["question_id"]) and x["role"] == role
                ),
                key=lambda x: x["turn"],
            )
            assert c["turns"] == [
                tok.decode(x["output_ids"], skip_special_tokens=True).strip() for x in mine
            ]
