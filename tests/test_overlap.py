"""Disjointness: no built-in benchmark prompt shares an 8-word n-gram with the training prompts
(train/prompts/*.jsonl), with another built-in set, or with another prompt of its own set beyond
the set's shared instruction, and the checker catches a planted copy."""

from __future__ import annotations

import io
import json
import os

import pytest

from tasks.overlap import (
    DATA,
    TRAIN_PROMPTS,
    N,
    find_overlap,
    main,
    ngrams,
    read_texts,
    report,
    training_files,
    words,
)

SETS = sorted(DATA.glob("*.jsonl"))


def builtin_texts():
    return [t for f in SETS for t in read_texts(f)]


def show(hits, k=5):
    return "\n".join(f"{h.prompt} ~ {h.ref}: {h.example!r} (+{h.count - 1})" for h in hits[:k])


def test_builtin_sets_share_nothing_with_training_prompts():
    files = training_files()
    if not files:
        pytest.skip(f"no training prompts in {TRAIN_PROMPTS} yet")
    reference = [t for f in files for t in read_texts(f)]
    assert sum(bool(text.strip()) for _, _, text in reference) >= 1, "no text read"
    hits = find_overlap(builtin_texts(), reference, N)
    assert not hits, f"{len(hits)} benchmark/training pairs share a {N}-gram:\n{show(hits)}"


def test_builtin_sets_are_disjoint_from_each_other():
    texts = builtin_texts()
    hits = find_overlap(texts, texts, N, same_file=False)
    assert not hits, show(hits)


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.stem)
def test_no_near_duplicates_within_a_set(path):
    """Beyond the set's common instruction (its longest common prefix), prompts are distinct."""
    texts = list(read_texts(path))
    prefix = os.path.commonprefix([t for _, _, t in texts])
    body = [(f, i, t[len(prefix) :]) for f, i, t in texts]
    hits = find_overlap(body, body, N)
    assert not hits, show(hits)


def test_checker_catches_a_planted_copy(tmp_path):
    """Eight words lifted from a benchmark prompt into a chat-style training row, with other
    casing and punctuation, are found; seven are not (the check is exactly n words long)."""
    name, pid, text = next(t for t in read_texts(DATA / "rag.jsonl") if t[1] == "rag-005")
    w = words(text)[40:48]
    for n_words, found in ((8, True), (7, False)):
        planted = " ".join(w[:n_words]).upper().replace(" ", ",  ", 1)
        row = {
            "id": "t1",
            "conversations": [
                {"from": "human", "value": f"Hello. {planted}!"},
                {"from": "gpt", "value": "Sure."},
            ],
        }
        f = tmp_path / f"plant{n_words}.jsonl"
        f.write_text(json.dumps(row) + "\n")
        hits = find_overlap(builtin_texts(), list(read_texts(f)), N)
        assert bool(hits) is found
        if found:
            assert [(h.prompt, h.ref, h.example) for h in hits] == [
                ((name, pid), (f.name, "t1"), " ".join(w))
            ]


def test_command_line_reports_and_exits_nonzero_on_overlap(tmp_path, capsys):
    _, pid, text = next(read_texts(DATA / "code.jsonl"))
    f = tmp_path / "train.jsonl"
    f.write_text(
        json.dumps({"text": " ".join(words(text)[:20])})
        + "\n"
        + json.dumps({"prompt": "an unrelated prompt about gardening in spring"})
        + "\n"
    )
    assert main([str(DATA / "code.jsonl"), "--against", str(f)]) == 1
    out = capsys.readouterr().out
    assert f"1 share a run of {N} words" in out and f"{pid} ~ train.jsonl:1" in out
    assert main([str(DATA / "qa.jsonl"), "--against", str(f)]) == 0
    assert main([str(tmp_path / "missing.jsonl"), "--against", str(f)]) == 2


def test_row_formats_and_ngrams():
    assert ngrams("A b, C d", 2) == {("a", "b"), ("b", "c"), ("c", "d")}
    assert ngrams("too short", 3) == set()
    buf = io.StringIO()
    assert report([DATA / "qa.jsonl"], [DATA / "qa.jsonl"], N, same_file=True, out=buf) == 0
    assert "32 prompts, 0 share" in buf.getvalue()
