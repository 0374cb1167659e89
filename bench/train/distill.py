"""Self-distillation data: the target answers the training prompts; we keep its tokens and states.

For each training prompt (chat template applied) the target generates a greedy answer in
batches (transformers `generate`: this is data making, not measurement). A second, teacher-forced
pass over prompt + answer stores the hidden states a drafter needs:
    ids     (L,)        int32   prompt + answer token ids
    start   int                 index of the first answer token
    hidden  {layer: (L, H)}     bfloat16 hidden states (`-1`: last layer after the final norm)
Saved as one torch file per generation batch under $SPECSWEEP_CACHE/distill/<key>/, keyed by
model, prompts and settings: later runs and other drafters reuse it, an interrupted run resumes.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from bench.models import cache_root, load_model
from bench.runner import encode
from tasks.loader import read_jsonl


def data_key(model: str, prompts: Path, max_new: int, layers: list[int], dtype: str) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([model, max_new, layers, dtype]).encode())
    h.update(prompts.read_bytes())
    return h.hexdigest()[:16]


@torch.inference_mode()
def answer(model, tok, prompt_ids: list[list[int]], max_new: int) -> list[list[int]]:
    """Greedy answers for a batch (left padding), cut after the first EOS."""
    width = max(map(len, prompt_ids))
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    inp = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
    mask = torch.zeros_like(inp)
    for i, ids in enumerate(prompt_ids):
        inp[i, width - len(ids):] = torch.tensor(ids)
        mask[i, width - len(ids):] = 1
    out = model.generate(inp.to(model.device), attention_mask=mask.to(model.device),
                         do_sample=False, max_new_tokens=max_new, pad_token_id=pad)
    answers = []
    for row in out[:, width:].tolist():
        if tok.eos_token_id in row:
            row = row[: row.index(tok.eos_token_id) + 1]
        answers.append(row)
    return answers


@torch.inference_mode()
def states(model, ids: list[int], layers: list[int]) -> dict[int, torch.Tensor]:
    out = model(input_ids=torch.tensor([ids], device=model.device), output_hidden_states=True,
                logits_to_keep=1)
    return {l: out.hidden_states[l][0].to(torch.bfloat16).cpu() for l in layers}


def build(model_path: str, prompts: Path, max_new: int, layers: list[int], dtype: str = "float32",
          batch: int = 16, limit: int | None = None, progress=None) -> list[dict]:
    """Generate (or load from the cache) the distillation set; returns the list of sequences."""
    key = data_key(model_path, prompts, max_new, layers, dtype) + (f"-n{limit}" if limit else "")
    folder = cache_root() / "distill" / key
    rows = read_jsonl(prompts)[:limit] if limit else read_jsonl(prompts)
    starts = list(range(0, len(rows), batch))
    shards = [folder / f"shard-{b // batch:04d}.pt" for b in starts]
    todo = [i for i, f in enumerate(shards) if not f.exists()]
    if todo:  # shards already written by an interrupted run are kept: this resumes
        model, tok = load_model(model_path, torch.device("cpu"), getattr(torch, dtype))
        enc = [encode(tok, [{"role": "user", "content": r["turns"][0]}], True) for r in rows]
        order = sorted(range(len(enc)), key=lambda i: len(enc[i]))  # similar lengths per batch
        task = progress.add_task("distill: answers", total=len(starts),
                                 completed=len(starts) - len(todo)) if progress else None
        folder.mkdir(parents=True, exist_ok=True)
        for s in todo:
            idx = order[starts[s] : starts[s] + batch]
            part = []
            for i, ans in zip(idx, answer(model, tok, [enc[i] for i in idx], max_new)):
                ids = enc[i] + ans
                part.append({"id": rows[i]["question_id"],
                             "ids": torch.tensor(ids, dtype=torch.int32),
                             "start": len(enc[i]), "hidden": states(model, ids, layers)})
            tmp = shards[s].with_suffix(".tmp")
            torch.save(part, tmp)
            tmp.rename(shards[s])
            if progress:
                progress.advance(task)
    return [seq for f in shards for seq in torch.load(f)]
