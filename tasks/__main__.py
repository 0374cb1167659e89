"""What a task holds: prompts, turns, mean length in characters and in the target's prompt tokens.

    python -m tasks                      # task=all (the seven built-in sets)
    python -m tasks core gsm8k --limit 50 --tokenizer embedded:smollm2-135m

Tokens are the first turn's prompt ids as the runner encodes them (the tokenizer's chat template
with the generation prompt); later turns depend on the model's own answers.
"""

from __future__ import annotations

import argparse
import sys
from statistics import mean

from groundfloor.errors import UserError
from groundfloor.prompting import encode
from tasks.loader import _task_cfg, load_prompts


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    from groundfloor.models import resolve_path  # cost: torch (~1.5 s), only for --tokenizer

    return AutoTokenizer.from_pretrained(resolve_path(name))


def stats(prompts, tokenizer=None) -> list[dict]:
    """One row per task: counts and mean lengths."""
    rows = []
    for task in dict.fromkeys(p.task for p in prompts):
        ps = [p for p in prompts if p.task == task]
        row = {
            "task": task,
            "category": ps[0].category,
            "prompts": len(ps),
            "two_turn": sum(len(p.turns) == 2 for p in ps),
            "mean_chars": round(mean(len(p.turns[0]) for p in ps)),
            "max_new_tokens": ps[0].max_new_tokens,
        }
        if tokenizer is not None:
            row["mean_tokens"] = round(
                mean(
                    len(encode(tokenizer, [{"role": "user", "content": p.turns[0]}], True))
                    for p in ps
                )
            )
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tasks", description=__doc__.split("\n")[0])
    ap.add_argument("tasks", nargs="*", default=["all"], help="task or group names (conf/task/)")
    ap.add_argument("--limit", type=int, default=None, help="prompts per task")
    ap.add_argument(
        "--tokenizer",
        default="embedded:smollm2-135m",
        help="tokenizer for prompt tokens (id, directory or embedded:NAME); "
        "'none' to count characters only",
    )
    args = ap.parse_args(argv)
    try:
        prompts = [p for t in args.tasks for p in load_prompts(_task_cfg(t), args.limit)]
        tok = None if args.tokenizer == "none" else load_tokenizer(args.tokenizer)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = stats(prompts, tok)
    cols = list(rows[0])
    print("  ".join(f"{c:>14}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]!s:>14}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
