"""Self-distillation data: the target answers the training prompts; we keep its tokens and states.

    python -m bench.train.distill [target=...] [limit=N] [device=cuda]   # build (resumable)

Batches of prompts of similar length are decoded together on the engine layer (engines/:
the lean forward where supported), left-padded, one token per row per step; a row stops at
EOS or `max_new_tokens`. Half of the prompts (by a hash of their id) are answered greedily, the
other half sampled at T = 1, as EAGLE-3's data is. The hidden states a drafter needs come from
the same forwards (no second pass): for every position of prompt + answer,
    ids     (L,)        int32   prompt + answer token ids
    start   int                 index of the first answer token
    hidden  {layer: (L, H)}     bfloat16 states at transformers' hidden_states indices
                                (−1: the last layer after the final norm)
Two-turn prompts (ShareGPT) continue with the second user turn after the target's own first
answer; its record is the whole second-turn prompt and answer.

Storage: $SPECSWEEP_CACHE/distill/<key>/shard-NNNN.pt (ids, starts, meta) plus one file per
layer (shard-NNNN.h<layer>.pt), so a drafter loads only the layers it uses. The key hashes the
target, engine settings, prompts and lengths: later runs reuse it, an interrupted run resumes
at the first missing shard. It is a one-off build, never a CI step.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import torch

from bench.models import cache_root

SHARD = 128  # prompts per shard file


def data_key(target: str, rows: list[dict], settings: dict) -> str:
    """The folder's key: target, settings and the first rows. Shard i always holds rows
    [i·SHARD, (i+1)·SHARD) of the (seeded, prefix-stable) selection, so raising or lowering
    `limit` keeps every finished shard."""
    h = hashlib.sha256(json.dumps([target, settings], sort_keys=True).encode())
    for r in rows[:SHARD]:
        h.update(json.dumps([r["question_id"], r["turns"]]).encode())
    return h.hexdigest()[:16]


def sampled(prompt_id: str) -> bool:
    """Half the prompts are answered at T = 1, chosen by a hash of the id (stable)."""
    return hashlib.sha256(prompt_id.encode()).digest()[0] % 2 == 1


@torch.inference_mode()
def decode_batch(engine, prompts: list[list[int]], max_new: int, temps: list[float],
                 layers: list[int], eos: set[int], generator=None) -> list[dict]:
    """Answers for a batch of prompt id lists, with hidden states at every position.

    Rows are left-padded to the longest prompt; position ids skip the padding and the mask hides
    it, so each row computes what it would alone (up to the batch's float reductions).
    """
    dev = engine.device
    B, W = len(prompts), max(map(len, prompts))
    pad = [W - len(p) for p in prompts]
    ids = torch.zeros(B, W, dtype=torch.long, device=dev)
    for b, p in enumerate(prompts):
        ids[b, pad[b]:] = torch.tensor(p, device=dev)
    padt = torch.tensor(pad, device=dev)
    cols = torch.arange(W, device=dev)
    valid = cols[None] >= padt[:, None]  # (B, W) key is a real token
    pos = (cols[None] - padt[:, None]).clamp_min(0)
    causal = cols[:, None] >= cols[None, :]
    # real keys only; a padding row sees itself, so its (unused) output stays finite
    mask = causal[None] & (valid[:, None, :] | torch.eye(W, dtype=torch.bool, device=dev)[None])
    cache = engine.new_cache(W + max_new + 1, batch=B)
    out = engine.forward(ids, cache, positions=pos, mask=mask, logits_to_keep=1,
                         hidden=tuple(layers))
    states = {l: [out.hidden[l].to(torch.bfloat16).cpu()] for l in layers}
    logits = out.logits[:, -1].float()
    temp = torch.tensor(temps, device=dev)[:, None]
    answers = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    lens = torch.tensor([len(p) for p in prompts], device=dev)
    for t in range(max_new):
        greedy = logits.argmax(-1)
        probs = torch.softmax(logits / temp.clamp_min(1e-6), -1)
        drawn = torch.multinomial(probs, 1, generator=generator)[:, 0]
        nxt = torch.where(temp[:, 0] > 0, drawn, greedy)
        nxt = torch.where(done, torch.zeros_like(nxt), nxt)
        for b in range(B):
            if not done[b]:
                answers[b].append(int(nxt[b]))
                if int(nxt[b]) in eos:
                    done[b] = True
        # feed the new tokens (also after the last one, for its hidden state)
        valid = torch.cat([valid, torch.ones(B, 1, dtype=torch.bool, device=dev)], 1)
        step_mask = valid[:, None, :]
        out = engine.forward(nxt[:, None], cache, positions=(lens + t)[:, None],
                             mask=step_mask, logits_to_keep=1, hidden=tuple(layers))
        for l in layers:
            states[l].append(out.hidden[l].to(torch.bfloat16).cpu())
        logits = out.logits[:, -1].float()
        if bool(done.all()):
            break
    full = {l: torch.cat(v, dim=1) for l, v in states.items()}  # (B, W + steps, H)
    rows = []
    for b, p in enumerate(prompts):
        n = len(answers[b])
        rows.append({"ids": torch.tensor(p + answers[b], dtype=torch.int32),
                     "start": len(p),
                     "hidden": {l: full[l][b, pad[b] : W + n].clone() for l in layers}})
    return rows


def _save(rows: list[dict], path: Path, layers: list[int]) -> None:
    """shard-NNNN.pt (ids, starts, meta) + shard-NNNN.h<l>.pt per layer, atomically."""
    for l in layers:
        tmp = path.with_suffix(f".h{l}.tmp")
        torch.save([r["hidden"][l] for r in rows], tmp)
        tmp.rename(path.with_suffix(f".h{l}.pt"))
    meta = [{k: v for k, v in r.items() if k != "hidden"} for r in rows]
    tmp = path.with_suffix(".tmp")
    torch.save(meta, tmp)
    tmp.rename(path)  # written last: its presence marks the shard complete


def load_shard(path: Path, layers: list[int]) -> list[dict]:
    rows = torch.load(path, weights_only=False)
    per = {l: torch.load(path.with_suffix(f".h{l}.pt")) for l in layers}
    for i, r in enumerate(rows):
        r["hidden"] = {l: per[l][i] for l in layers}
    return rows


def build(target: str, rows: list[dict], max_new: int, layers: list[int], settings: dict,
          batch: int = 16, progress=None, need: list[int] | None = None) -> list[dict]:
    """Generate (or load) the distillation set for `rows`; returns sequences with the states
    of `need` (default: all stored layers)."""
    from engines.load import load

    from bench.models import load_generation_config, load_tokenizer
    from bench.prompting import encode, eos_ids

    key = data_key(target, rows, {"max_new": max_new, "layers": layers, **settings})
    folder = cache_root() / "distill" / key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(
        {"target": target, "max_new_tokens": max_new, "layers": layers, **settings}, indent=1))
    shards = [folder / f"shard-{i:04d}.pt" for i in range((len(rows) + SHARD - 1) // SHARD)]
    todo = [i for i, f in enumerate(shards) if not f.exists()]
    if todo:
        engine, _ = load(target, settings.get("device", "cpu"), engine=settings.get("engine",
                         "auto"), weights=settings.get("weights", "auto"),
                         dtype=settings.get("dtype", "auto"), kernel=settings.get("kernel", "auto"))
        tok = load_tokenizer(target)
        eos = eos_ids(tok, engine.config, load_generation_config(target))
        gen = torch.Generator(device=engine.device).manual_seed(int(settings.get("seed", 0)))
        task = progress.add_task("distill", total=len(shards),
                                 completed=len(shards) - len(todo)) if progress else None
        t0, tokens = time.time(), 0
        for s in todo:
            part = rows[s * SHARD : (s + 1) * SHARD]
            seqs = _answer(engine, tok, eos, part, max_new, layers, batch, gen)
            _save(seqs, shards[s], layers)
            tokens += sum(len(x["ids"]) - x["start"] for x in seqs)
            rate = tokens / max(time.time() - t0, 1e-9)
            done = todo.index(s) + 1
            eta = (time.time() - t0) / done * (len(todo) - done)
            line = (f"shard {s + 1}/{len(shards)}: {tokens} answer tokens this run, "
                    f"{rate:.0f}/s, ETA {eta / 60:.0f} min")
            with open(folder / "progress.log", "a") as log:  # readable without a terminal
                log.write(time.strftime("%H:%M:%S ") + line + "\n")
            if progress:
                progress.update(task, advance=1, description=f"distill {rate:.0f} answer tok/s")
    need = layers if need is None else need
    return [seq for f in shards for seq in load_shard(f, need)]


def _answer(engine, tok, eos, part: list[dict], max_new: int, layers: list[int], batch: int,
            gen) -> list[dict]:
    """One shard: first turns in length-sorted batches, then the second turns of two-turn rows."""
    from bench.prompting import encode

    out: list[dict | None] = [None] * len(part)
    msgs = [[{"role": "user", "content": r["turns"][0]}] for r in part]
    for turn in (0, 1):
        idx = [i for i, r in enumerate(part) if len(r["turns"]) > turn]
        enc = {i: encode(tok, msgs[i], True) for i in idx}
        idx.sort(key=lambda i: len(enc[i]))
        for b in range(0, len(idx), batch):
            chunk = idx[b : b + batch]
            temps = [1.0 if sampled(part[i]["question_id"]) else 0.0 for i in chunk]
            seqs = decode_batch(engine, [enc[i] for i in chunk], max_new, temps, layers, eos,
                                gen)
            for i, seq, t in zip(chunk, seqs, temps):
                seq.update(id=part[i]["question_id"] + (f"/turn{turn + 1}" if turn else ""),
                           source=part[i].get("source", "templated"), temperature=t, turn=turn)
                if turn == 0:
                    out[i] = seq
                    answer = tok.decode(seq["ids"][seq["start"]:].tolist(),
                                        skip_special_tokens=True)
                    msgs[i] = msgs[i] + [{"role": "assistant", "content": answer},
                                         {"role": "user", "content": part[i]["turns"][1]}] \
                        if len(part[i]["turns"]) > 1 else msgs[i]
                else:
                    out.append(seq)
    return [s for s in out if s is not None]


def settings_of(cfg) -> dict:
    d = cfg.distill
    out = {"engine": str(d.engine), "weights": str(d.weights), "dtype": str(d.dtype),
           "kernel": str(d.kernel), "device": str(d.device), "seed": int(cfg.seed)}
    extra = cfg.get("extra_benchmarks") or []
    if extra:  # another selection of prompts: data of its own
        out["extra_benchmarks"] = sorted(str(p) for p in extra)
    return out


def main() -> None:
    """`python -m bench.train.distill [key=value ...]`: build the data of conf/train.yaml."""
    import sys

    from hydra import compose, initialize_config_dir
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    from bench.config import CONF
    from bench.errors import UserError
    from bench.train.sources import from_config

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", overrides=sys.argv[1:])
        rows, stats = from_config(cfg)
        print(json.dumps(stats, indent=1), file=sys.stderr)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TimeRemainingColumn(),
                      console=Console(stderr=True)) as progress:
            t0 = time.time()
            build(str(cfg.target), rows, int(cfg.max_new_tokens), list(cfg.layers),
                  settings_of(cfg), int(cfg.distill.batch), progress, need=[])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"distillation data ready in {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
