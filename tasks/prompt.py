"""A benchmark prompt, and the reader of Spec-Bench's question files (JSON Lines).

    Prompt(id, task, category, turns, subcategory, max_new_tokens, meta)
Every source (tasks/loader.py) ends in a list of these; a turn is one user message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from groundfloor.errors import UserError


@dataclass
class Prompt:
    id: str
    task: str
    category: str
    turns: list[str]
    subcategory: str = ""
    max_new_tokens: int = 128
    meta: dict = field(default_factory=dict)


def read_jsonl(path: Path) -> list[dict]:
    """Spec-Bench question lines; a malformed line is reported with file and line number."""
    if not path.exists():
        raise UserError(f"task file {str(path)!r} does not exist")
    rows = []
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{no}: not valid JSON ({e.msg} at column {e.colno})")
            if not isinstance(row, dict):
                raise UserError(f"{path}:{no}: expected a JSON object, got {type(row).__name__}")
            turns = row.get("turns")
            if (
                not isinstance(turns, list)
                or not turns
                or not all(isinstance(t, str) and t for t in turns)
            ):
                raise UserError(f"{path}:{no}: 'turns' must be a non-empty list of strings")
            if "question_id" not in row:
                raise UserError(f"{path}:{no}: missing 'question_id'")
            rows.append(row)
    if not rows:
        raise UserError(f"task file {str(path)!r} holds no questions")
    return rows
