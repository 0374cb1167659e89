"""Benchmark tasks as data.

A task is one YAML in `conf/task/` (name, source, category, file or path, template,
max_new_tokens, version); a group YAML lists other tasks under `include`. Built-in prompt sets are
JSON Lines files in `tasks/data/` in Spec-Bench's question format
(`question_id`, `category`, `turns`), written for this suite.

To add a task: drop a JSONL file in `tasks/data/` and a YAML in `conf/task/` with
`source: builtin`. To add a source that needs code, add a function to `tasks.loader.SOURCES`.
"""
from tasks.loader import Prompt, load_prompts  # noqa: F401
