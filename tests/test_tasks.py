"""Built-in tasks load offline with the expected counts and schema; Spec-Bench files parse."""
from __future__ import annotations

import json

import pytest

from bench.errors import UserError
from tasks.loader import _task_cfg, load_prompts, read_jsonl
from tasks.specbench import CATEGORIES, map_category

CORE = ("dialog", "code", "reasoning", "translation")


@pytest.mark.parametrize("name", CORE)
def test_core_task_loads(name):
    prompts = load_prompts(_task_cfg(name))
    assert len(prompts) >= 20
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(p.category == name and p.turns and all(t.strip() for t in p.turns)
               for p in prompts)
    if name == "dialog":
        assert all(len(p.turns) == 2 for p in prompts)


def test_core_group_and_limit():
    prompts = load_prompts(_task_cfg("core"), limit=3)
    assert [p.task for p in prompts] == [t for t in CORE for _ in range(3)]


def test_specbench_file_round_trips(tmp_path):
    rows = [{"question_id": 81, "category": "writing", "turns": ["a", "b"]},
            {"question_id": 161, "category": "translation", "turns": ["Translate: Hallo"]},
            {"question_id": 321, "category": "math_reasoning", "turns": ["2+2?"]},
            {"question_id": 401, "category": "rag", "turns": ["ctx q"]}]
    f = tmp_path / "question.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = dict(_task_cfg("jsonl"), path=str(f))
    prompts = load_prompts(cfg)
    assert [p.category for p in prompts] == ["dialog", "translation", "reasoning", "rag"]
    assert [p.id for p in prompts] == ["81", "161", "321", "401"]
    assert prompts[0].turns == ["a", "b"] and prompts[0].subcategory == "writing"


def test_category_map_covers_specbench():
    for raw in ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
                "humanities", "translation", "summarization", "qa", "math_reasoning", "rag"):
        assert map_category(raw) in CATEGORIES


def test_missing_file_is_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_jsonl(tmp_path / "nope.jsonl")
