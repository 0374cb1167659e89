"""The training loop every drafter shares: AdamW, cosine schedule, checkpoints, held-out eval.

A drafter spec supplies `module` (the trainable nn.Module), `batches(split, rng)` (an iterator of
batches for "train" or "eval"), `step_loss(batch)` → (loss, per-position loss, per-position top-1
accuracy) and `save(out)`. The loop checkpoints to out/checkpoint.pt every `ckpt_every` steps and
resumes from it, evaluates on the held-out split, and logs train_log.jsonl and eval.json.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch


def evaluate(spec, max_batches: int | None = None) -> dict:
    spec.module.eval()
    tot_l, tot_a, n = None, None, 0
    with torch.no_grad():
        for b, batch in enumerate(spec.batches("eval", None)):
            if max_batches and b >= max_batches:
                break
            _, l, a = spec.step_loss(batch)
            tot_l = l if tot_l is None else tot_l + l
            tot_a = a if tot_a is None else tot_a + a
            n += 1
    spec.module.train()
    if not n:
        return {}
    return {"loss_per_pos": (tot_l / n).tolist(), "top1_per_pos": (tot_a / n).tolist()}


def train(spec, out: Path, steps: int, lr: float, warmup: int = 20, ckpt_every: int = 100,
          eval_every: int = 200, seed: int = 0, resume: bool = True, progress=None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    params = [p for p in spec.module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    ckpt, step = out / "checkpoint.pt", 0
    if resume and ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        spec.module.load_state_dict(state["module"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        step = state["step"]
        torch.set_rng_state(state["rng"])
    log = open(out / "train_log.jsonl", "a")
    task = progress.add_task("train", total=steps, completed=step) if progress else None
    rng = torch.Generator().manual_seed(seed + step)
    batches = spec.batches("train", rng)
    t0 = time.time()
    spec.module.train()
    fresh = False  # the iterator was just restarted
    while step < steps:
        try:
            batch = next(batches)
        except StopIteration:
            batches = spec.batches("train", rng)
            if fresh:
                raise ValueError("the training split yields no batch: too little data")
            fresh = True
            continue
        fresh = False
        loss, per, acc = spec.step_loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        step += 1
        rec = {"step": step, "loss": float(loss.detach()), "top1_per_pos": [round(float(x), 4) for x in acc],
               "lr": sched.get_last_lr()[0], "elapsed_s": round(time.time() - t0, 1)}
        if step % eval_every == 0 or step == steps:
            rec["eval"] = evaluate(spec, max_batches=20)
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if progress:
            progress.update(task, completed=step,
                            description=f"train loss {float(loss.detach()):.3f} top1 {acc.tolist()[0]:.2f}")
        if step % ckpt_every == 0 or step == steps:
            torch.save({"module": spec.module.state_dict(), "opt": opt.state_dict(),
                        "sched": sched.state_dict(), "step": step, "rng": torch.get_rng_state()},
                       ckpt)
    log.close()
    final = evaluate(spec)
    final["train_seconds"] = round(time.time() - t0, 1)
    (out / "eval.json").write_text(json.dumps(final, indent=2))
    return final
