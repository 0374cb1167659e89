"""Answer files in Spec-Bench's format, so Spec-Bench's own scripts can read our runs.

Written into the run directory from records.jsonl after every run (repeat 0 of each side; a
server request that failed has no answer):

    answers/ar.jsonl         the baseline
    answers/<method>.jsonl   the method (answers/ar-method.jsonl when the method is ar itself)

One JSON line per question, turns in order:

    {"question_id": 81, "category": "writing", "answer_id": "...", "model_id": "smollm2-135m-ngram",
     "choices": [{"index": 0, "turns": ["answer 1", "answer 2"], "decoding_steps": [31, 40],
                  "new_tokens": [64, 64], "wall_time": [1.9, 2.2],
                  "accept_lengths": [1, 3, 1, ...]}],
     "tstamp": 1700000000.0}

decoding_steps are target forwards (prefill included; null for a server, which reports them per
pass, not per request), wall_time is seconds including prefill,
and accept_lengths is the tokens emitted per round over all turns in one flat list, as Spec-Bench
writes it. The category is Spec-Bench's name (tasks/specbench.py), so its per-task report works:

    python evaluation/speed.py --file-path RUN/answers/ngram.jsonl \
        --base-path RUN/answers/ar.jsonl --tokenizer-path TARGET
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from tasks.specbench import specbench_category

ROLES = ("baseline", "method")


def question_id(prompt_id: str):
    """Spec-Bench's question ids are integers; ours are strings like 'dialog-001'."""
    return int(prompt_id) if prompt_id.isdigit() else prompt_id


def answer_lines(
    records: list[dict], role: str, tokenizer, model_id: str, tstamp: float | None = None
) -> list[dict]:
    """One Spec-Bench answer per prompt, in run order, from one role's repeat-0 records
    (a turn recorded twice, by a rerun into the same directory, keeps its latest record)."""
    by_prompt: dict[tuple[str, str], dict[int, dict]] = {}
    for r in records:
        if r["role"] == role and r["repeat"] == 0 and not r.get("error"):
            by_prompt.setdefault((r["task"], str(r["prompt_id"])), {})[int(r["turn"])] = r
    tstamp = time.time() if tstamp is None else tstamp
    lines = []
    for (_, pid), turns in by_prompt.items():
        recs = [turns[t] for t in sorted(turns)]
        choice = {
            "index": 0,
            "turns": [
                tokenizer.decode(r["output_ids"], skip_special_tokens=True).strip() for r in recs
            ],
            "decoding_steps": [
                None
                if r["target_forwards"] is None  # a server's
                else int(r["target_forwards"])
                for r in recs
            ],
            "new_tokens": [int(r["new_tokens"]) for r in recs],
            "wall_time": [float(r["wall_s"]) for r in recs],
            "accept_lengths": [int(a) for r in recs for a in r["accept_lengths"]],
        }
        first = recs[0]
        category = specbench_category(first["category"], first.get("subcategory", ""))
        lines.append(
            {
                "question_id": question_id(pid),
                "category": category,
                "answer_id": uuid.uuid4().hex[:22],
                "model_id": model_id,
                "choices": [choice],
                "tstamp": tstamp,
            }
        )
    return lines


def file_name(role: str, method: str) -> str:
    if role == "baseline":
        return "ar.jsonl"
    return "ar-method.jsonl" if method == "ar" else f"{method}.jsonl"


def write_answers(out: Path, records_path: Path, tokenizer, model_name: str) -> dict[str, Path]:
    """answers/<name>.jsonl for the baseline and the method; returns {role: path}."""
    with open(records_path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    if not records:
        return {}
    method = str(records[0]["method"])
    folder = out / "answers"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    ran = (r.get("method_run") for r in records if r["role"] == "baseline")
    base = next(ran, None) or "ar"  # ar, or hf_ar for transformers' own modes
    for role in ROLES:
        name = base if role == "baseline" else method
        lines = answer_lines(records, role, tokenizer, f"{model_name}-{name}")
        paths[role] = folder / file_name(role, method)
        paths[role].write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return paths
