"""Every task loads offline (or says in one line why not), built-in counts, lengths and schema hold,
groups expand, and a Spec-Bench-format file (written here) reads with its 13 categories mapped."""

from __future__ import annotations

import json
from statistics import mean

import pytest

from groundfloor.errors import UserError
from tasks.loader import SOURCES, _task_cfg, load_prompts, task_names
from tasks.prompt import read_jsonl
from tasks.specbench import CATEGORIES, MT_BENCH, map_category, specbench_category

CORE = ("dialog", "code", "reasoning", "translation")
SPECBENCH_CATEGORIES = MT_BENCH + ("translation", "summarization", "qa", "math_reasoning", "rag")


@pytest.mark.parametrize("name", CATEGORIES)
def test_builtin_task_loads_offline(name):
    cfg = _task_cfg(name)
    assert cfg["source"] == "builtin" and cfg["category"] == name and cfg["version"] >= 1
    prompts = load_prompts(cfg)
    assert len(prompts) >= 30
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(p.task == name and p.category == name and p.subcategory for p in prompts)
    assert all(p.turns and all(isinstance(t, str) and t.strip() for t in p.turns) for p in prompts)
    assert all(p.max_new_tokens == cfg["max_new_tokens"] <= 128 for p in prompts)
    if name == "dialog":
        assert len(prompts) >= 24 and all(len(p.turns) == 2 for p in prompts)
        assert {p.subcategory for p in prompts} == set(MT_BENCH)
    else:
        assert all(len(p.turns) == 1 for p in prompts)


@pytest.mark.parametrize("name", ("summarization", "rag"))
def test_long_context_sets_are_long(name):
    assert mean(len(p.turns[0]) for p in load_prompts(_task_cfg(name))) >= 2500


def test_translation_has_german_and_another_pair():
    pairs = {p.subcategory for p in load_prompts(_task_cfg("translation"))}
    assert "de-en" in pairs and len(pairs) >= 2


def test_reasoning_has_numeric_answers():
    prompts = load_prompts(_task_cfg("reasoning"))
    assert all(isinstance(p.meta.get("answer"), (int, float)) for p in prompts)


def test_rag_prompts_hold_passages_and_a_question():
    for p in load_prompts(_task_cfg("rag")):
        assert p.turns[0].count("Passage ") >= 2 and "?" in p.turns[0], p.id


@pytest.mark.parametrize("name", task_names())
def test_task_yaml_schema(name):
    cfg = _task_cfg(name)
    assert cfg["name"] == name
    if "include" in cfg:
        assert all(
            sub in task_names() and "include" not in _task_cfg(sub) for sub in cfg["include"]
        )
        return
    assert cfg["source"] in SOURCES and cfg["version"] >= 1
    assert cfg["category"] in CATEGORIES or (cfg["source"] == "jsonl" and cfg["category"] is None)
    assert 1 <= cfg["max_new_tokens"] <= 128
    assert "{turn}" in cfg["template"]


@pytest.mark.parametrize("name", task_names())
def test_every_task_loads_offline_or_says_why(name, monkeypatch, tmp_path):
    """Offline with an empty cache: built-in sets and groups load; the rest is one clear line."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = _task_cfg(name)
    if cfg.get("source") == "hf":
        cfg["cache_dir"] = str(tmp_path)
    if "include" in cfg or cfg["source"] == "builtin":
        assert load_prompts(cfg, limit=2)
        return
    with pytest.raises(UserError) as e:
        load_prompts(cfg, limit=2)
    msg = str(e.value)
    assert "\n" not in msg
    if cfg["source"] == "jsonl":
        assert "task.path=FILE" in msg
    else:
        assert cfg["dataset"] in msg
        assert "pre-fetch" in msg or "pip install 'specsweep[datasets]'" in msg


def test_groups_core_and_all():
    prompts = load_prompts(_task_cfg("core"), limit=3)
    assert [p.task for p in prompts] == [t for t in CORE for _ in range(3)]
    prompts = load_prompts(_task_cfg("all"), limit=3)
    assert [p.category for p in prompts] == [c for c in CATEGORIES for _ in range(3)]


def test_specbench_file_round_trips(tmp_path):
    """A question file with all 13 Spec-Bench categories: mapped to ours, and back for answers."""
    rows = [
        {
            "question_id": 81 + i,
            "category": c,
            "turns": [f"question {i}"] + ([f"follow-up {i}"] if c in MT_BENCH else []),
        }
        for i, c in enumerate(SPECBENCH_CATEGORIES)
    ]
    f = tmp_path / "question.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prompts = load_prompts(dict(_task_cfg("jsonl"), path=str(f)))
    assert [p.id for p in prompts] == [str(r["question_id"]) for r in rows]
    assert [p.category for p in prompts] == ["dialog"] * 8 + [
        "translation",
        "summarization",
        "qa",
        "reasoning",
        "rag",
    ]
    assert [p.turns for p in prompts] == [r["turns"] for r in rows]
    assert [specbench_category(p.category, p.subcategory) for p in prompts] == list(
        SPECBENCH_CATEGORIES
    )


def test_jsonl_category_filter_and_fixed_category(tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_text(
        '{"question_id": 1, "category": "qa", "turns": ["a"]}\n'
        '{"question_id": 2, "category": "rag", "turns": ["b"]}\n'
    )
    base = dict(_task_cfg("jsonl"), path=str(f))
    assert [p.id for p in load_prompts(dict(base, categories=["rag"]))] == ["2"]
    assert {p.category for p in load_prompts(dict(base, category="qa"))} == {"qa"}


def test_category_map_covers_specbench():
    assert len(SPECBENCH_CATEGORIES) == 13
    for raw in SPECBENCH_CATEGORIES:
        assert map_category(raw) in CATEGORIES
    # Spec-Bench's `reasoning` is MT-Bench's (two-turn dialog); math word problems: math_reasoning
    assert map_category("reasoning") == "dialog"
    assert map_category("math_reasoning") == "reasoning"
    assert map_category("code") == "code" and map_category("dialog") == "dialog"


def test_builtin_files_read_the_same_as_specbench_files(tmp_path):
    """Our sets are Spec-Bench question files: task=jsonl gives each its own category."""
    from tasks.loader import DATA

    for name in CATEGORIES:
        prompts = load_prompts(dict(_task_cfg("jsonl"), path=str(DATA / f"{name}.jsonl")))
        assert {p.category for p in prompts} == {name}


def test_missing_file_is_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_jsonl(tmp_path / "nope.jsonl")


def test_unknown_source_is_user_error():
    with pytest.raises(UserError, match="task.source='ftp' is not valid"):
        load_prompts({"name": "x", "source": "ftp"})
