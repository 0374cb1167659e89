"""Prompts that fit a model's context: a conversation's every user turn, templated, plus the
new tokens each turn may add; truncated from one side where the run asks (task.truncate)."""

from __future__ import annotations

import sys

from groundfloor.prompting import encode
from tasks.prompt import Prompt


def context_limit(config) -> int | None:
    return getattr(config, "max_position_embeddings", None)


def fit_context(
    prompts: list[Prompt], tokenizer, max_new, limit: int | None, truncate, use_template: bool
) -> tuple[list[Prompt], list[str]]:
    """Prompts whose whole conversation (every user turn, templated, plus max_new tokens per
    turn) fits the model's context. Without `truncate` a prompt that does not fit is left out
    with one line on stderr (and counted as skipped); with truncate=left|right its longest turn
    is shortened from that side, in tokens, until it fits."""

    if not limit:
        return prompts, []
    kept, skipped = [], []

    def need(p: Prompt) -> int:
        msgs = [{"role": "user", "content": t} for t in p.turns]
        return len(encode(tokenizer, msgs, use_template)) + max_new(p) * len(p.turns)

    for p in prompts:
        n = need(p)
        if n <= limit:
            kept.append(p)
            continue
        if not truncate:
            print(
                f"warning: prompt {p.id} needs {n} positions (its turns and {max_new(p)} new "
                f"tokens per turn), more than the model's {limit}; left out (task.truncate="
                f"left|right would shorten it)",
                file=sys.stderr,
            )
            skipped.append(p.id)
            continue
        turns = list(p.turns)
        while n > limit:
            i = max(range(len(turns)), key=lambda j: len(turns[j]))
            ids = tokenizer(turns[i], add_special_tokens=False)["input_ids"]
            cut = min(len(ids) - 1, n - limit + 8)
            if cut <= 0:
                break
            ids = ids[cut:] if truncate == "left" else ids[: len(ids) - cut]
            turns[i] = tokenizer.decode(ids)
            p = Prompt(p.id, p.task, p.category, turns, p.subcategory, p.max_new_tokens, p.meta)
            n = need(p)
        (kept if n <= limit else skipped).append(p if n <= limit else p.id)
    return kept, skipped
