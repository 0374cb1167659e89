"""Answer files in Spec-Bench's format, so Spec-Bench's own scripts read our runs as theirs.

Written into the run directory from records.jsonl after every run (repeat 0 of each side; a
server request that failed has no answer):

    answers/ar.jsonl         the baseline
    answers/<method>.jsonl   the method (answers/ar-method.jsonl when the method is ar itself)

One JSON line per question, turns in order:

    {"question_id": 81, "category": "writing", "answer_id": "...", "model_id": "smollm2-135m-ngram",
     "choices": [{"index": 0, "turns": ["answer 1", "answer 2"], "decoding_steps": [30, 39],
                  "new_tokens": [64, 64], "wall_time": [1.9, 2.2],
                  "accept_lengths": [2, 1, 4, ...]}],
     "tstamp": 1700000000.0}

Each field as Spec-Bench's inference scripts (evaluation/eval.py and the forward functions of
inference_eagle.py, inference_medusa.py) record it, per turn:
    turns           the answer text: the new tokens decoded, special tokens left out, stripped
    new_tokens      tokens emitted (ours: up to max_new_tokens or the first EOS)
    wall_time       seconds, prefill included
    accept_lengths  one flat list over the turns, one entry per decoding step (step_lengths)
    decoding_steps  the turn's entries in accept_lengths (null for a server, which reports
                    forwards per pass, not per request)
The category is Spec-Bench's name (tasks/specbench.py), so its per-task report works.
evaluation/speed.py reads these files (its command line always runs get_mean_speedup on its own
paths, so call its function: `speed(FILE, BASE, TOKENIZER_DIR, task="overall")`); its speedup
is `speedup_specbench` (bench.outputs.metrics, computed from the same records through
answer_turns) and its "mean accepted tokens" is `tau_round` (docs/metrics.md, "Spec-Bench's
answer files and statistics").
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


def answer_text(tokenizer, ids: list[int]) -> str:
    """A turn's answer as Spec-Bench stores it: the new tokens decoded without special tokens,
    stripped."""
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


def recount(tokenizer, text: str) -> int:
    """evaluation/speed.py's token count of a baseline answer: the target tokenizer's encoding of
    the stored text, less one (a Llama tokenizer's BOS; it subtracts one whatever the tokenizer
    adds). Recorded per turn as `recount_tokens` (bench.run.runner)."""
    return len(tokenizer(text).input_ids) - 1


def step_lengths(record: dict) -> list[int]:
    """One turn's accept lengths as Spec-Bench counts them, one per decoding step.

    Its EAGLE and Medusa scripts count in a step the token the previous forward produced plus
    the drafts this forward accepted: the prefill's token opens step 1 and the last forward's
    own token falls in no step. Over our verify rounds that is 1 + a_r (a_r: drafts accepted,
    `round_accepted`), so the mean over steps is τ_round (bench.outputs.acceptance). Our records'
    own `accept_lengths` count each forward's emitted tokens, the prefill's one as a round of
    its own: their mean is τ. transformers' own modes (bench.decode.wholeturn) verify their first
    draft in the prefill forward and record no round apart from it; their steps are their
    forwards with the tokens each emitted, as Spec-Bench's PLD script counts its fused prefill."""
    rounds = record.get("round_accepted")
    emitted = record.get("accept_lengths") or []
    if isinstance(rounds, list) and len(emitted) == len(rounds) + 1:  # our loop: prefill + rounds
        return [1 + int(a) for a in rounds]
    return [int(a) for a in emitted]


def _failed(record: dict) -> bool:
    err = record.get("error")
    return bool(err) and err == err  # a string; NaN where a table mixed records without one


def answer_turns(records, role: str) -> dict[tuple[str, str], list[dict]]:
    """The records one role's answer file holds: {(task, prompt id): its turns' records in turn
    order}, prompts in run order; repeat 0 (Spec-Bench measures each question once), requests
    that failed left out, and a turn recorded twice (a rerun into the same directory) keeps its
    latest record. bench.outputs.metrics.specbench_speedup reads the same selection."""
    by_prompt: dict[tuple[str, str], dict[int, dict]] = {}
    for r in records:
        if r["role"] == role and int(r["repeat"]) == 0 and not _failed(r):
            by_prompt.setdefault((str(r["task"]), str(r["prompt_id"])), {})[int(r["turn"])] = r
    return {key: [turns[t] for t in sorted(turns)] for key, turns in by_prompt.items()}


def answer_lines(
    records: list[dict], role: str, tokenizer, model_id: str, tstamp: float | None = None
) -> list[dict]:
    """One Spec-Bench answer per prompt, in run order, from one role's records (answer_turns)."""
    tstamp = time.time() if tstamp is None else tstamp
    lines = []
    for (_, pid), recs in answer_turns(records, role).items():
        steps = [step_lengths(r) for r in recs]
        choice = {
            "index": 0,
            "turns": [answer_text(tokenizer, r["output_ids"]) for r in recs],
            "decoding_steps": [
                None if r["target_forwards"] is None else len(s)  # a server's: unknown
                for r, s in zip(recs, steps)
            ],
            "new_tokens": [int(r["new_tokens"]) for r in recs],
            "wall_time": [float(r["wall_s"]) for r in recs],
            "accept_lengths": [a for s in steps for a in s],
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
