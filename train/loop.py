"""The training loop every drafter shares: AdamW, cosine schedule, checkpoints, held-out eval,
early stopping.

A drafter spec supplies `module` (the trainable nn.Module), `batches(split, rng)` (an iterator of
batches for "train" or "eval"), `step_loss(batch)` → (loss, per-position loss, per-position top-1
accuracy) and `save(out)`. Reproducible on the CPU: epoch e shuffles with a generator seeded by
(seed, e), and a checkpoint stores the epoch, the batches already taken from it, the optimizer,
schedule, RNG state and the best weights so far, so a resumed run takes exactly the steps an
uninterrupted one would (tests/test_train.py checks the weights bitwise). A checkpoint also keeps
the settings its run was given (`settings`: data, target, drafter, init...; the CLI passes the
resolved config without the step count), and a run given other settings does not resume it:
`check_resume` stops with one line naming what differs. Every `eval_every`
steps the held-out loss (mean over draft positions, first `eval_batches` batches) is measured;
the best weights are kept, and training stops early after `patience` evaluations without
improvement. The final report has held-out and training-split accuracy side by side (the gap
shows memorisation). Logs: train_log.jsonl, eval.json.

Precision (`precision`, resolve_precision): float32, or bfloat16 autocast around the forward and
the loss (the weights, their gradients and AdamW's moments stay float32); `auto` is bfloat16
where the CPU computes it natively (avx512_bf16 or amx_bf16 in engines.cpu's flags), float32
elsewhere: by the instruction set, never by a clock. The held-out evaluations run in float32
whatever the training precision, so a head's held-out loss does not depend on the machine.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import time
from pathlib import Path

import torch

from engines import cpu
from groundfloor.errors import UserError
from train.schedule import Schedule

PRECISIONS = ("auto", "float32", "bfloat16")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # the CPU computes bfloat16 products natively


def resolve_precision(asked: str) -> tuple[str, str]:
    """The training precision `asked` (auto, float32, bfloat16) → (float32 or bfloat16, why),
    auto chosen by the CPU's instruction set (engines.cpu's flags, read once)."""
    asked = str(asked)
    if asked not in PRECISIONS:
        raise UserError(f"precision={asked!r} is not valid; choose one of: {', '.join(PRECISIONS)}")
    have = [f for f in BF16_FLAGS if f in cpu.cpu_flags()]
    neither = f"the CPU has neither {' nor '.join(BF16_FLAGS)}"
    if asked == "float32":
        return "float32", "asked for"
    if asked == "bfloat16":
        native = f"native: {', '.join(have)}" if have else f"emulated: {neither}"
        return "bfloat16", f"asked for ({native})"
    if have:
        return "bfloat16", f"auto: the CPU computes bfloat16 natively ({', '.join(have)})"
    return "float32", f"auto: {neither}"


def autocast(precision: str):
    """The context the forward and the loss run in: bfloat16 autocast on the CPU, or none."""
    if precision == "bfloat16":
        return torch.autocast(device_type="cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def evaluate(spec, max_batches: int | None = None, split: str = "eval") -> dict:
    spec.module.eval()
    tot_l, tot_a, n = None, None, 0
    with torch.no_grad():
        for b, batch in enumerate(spec.batches(split, None)):
            if max_batches and b >= max_batches:
                break
            _, l, a = spec.step_loss(batch)
            tot_l = l if tot_l is None else tot_l + l
            tot_a = a if tot_a is None else tot_a + a
            n += 1
    spec.module.train()
    if not n:
        return {}
    return {
        "loss_per_pos": (tot_l / n).tolist(),
        "top1_per_pos": (tot_a / n).tolist(),
        "batches": n,
    }


def held_out_loss(result: dict) -> float:
    return (
        float(sum(result["loss_per_pos"]) / len(result["loss_per_pos"])) if result else float("inf")
    )


def _epoch(spec, seed: int, epoch: int):
    return spec.batches("train", torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def train(
    spec,
    out: Path,
    steps: int,
    lr: float,
    warmup: int = 20,
    ckpt_every: int = 100,
    eval_every: int = 200,
    seed: int = 0,
    resume: bool = True,
    progress=None,
    patience: int | None = None,
    eval_batches: int = 20,
    settings: dict | None = None,
    precision: str = "float32",
    schedule: Schedule | None = None,
) -> dict:
    """Train `spec` for `steps` optimizer steps (this sitting's; with a `schedule` that goes on
    from an earlier sitting, at most its steps left) and return the final evaluation, with
    `stream`: where the data stream stopped."""
    if precision not in PRECISIONS[1:]:
        raise UserError(f"precision={precision!r}: give float32 or bfloat16 (resolve_precision)")
    out.mkdir(parents=True, exist_ok=True)
    schedule = schedule or Schedule.fresh(steps, lr, warmup)
    steps = min(steps, schedule.left())
    params, opt, sched = _optimizer(spec, schedule)
    ckpt = out / "checkpoint.pt"
    step, best, best_state, stale = 0, math.inf, None, 0
    epoch, taken = schedule.epoch, schedule.taken
    resumed = resume and ckpt.exists()
    if resumed:
        check_resume(out, settings)
        step, epoch, taken, best, best_state, stale = _restore(ckpt, spec, opt, sched)
    log = open(out / "train_log.jsonl", "a" if resumed else "w")
    task = progress.add_task("train", total=steps, completed=step) if progress else None
    stream = _stream(spec, seed, epoch, taken)
    spec.module.train()
    stopped, t0 = None, time.time()
    while step < steps and not stopped:
        t_step = time.time()
        batch, epoch, taken = next(stream)
        loss, acc = _update(spec, batch, params, opt, sched, precision)
        step += 1
        rec = {"step": step, "epoch": epoch, "loss": loss, "step_s": round(time.time() - t_step, 3)}
        rec["top1_per_pos"] = [round(float(x), 4) for x in acc]
        rec.update(lr=sched.get_last_lr()[0], elapsed_s=round(time.time() - t0, 1))
        if step % eval_every == 0 or step == steps:
            judged = _judge(spec, eval_batches, best, best_state, stale)
            rec["eval"], best, best_state, stale = judged
            if patience and stale >= patience:
                stopped = step
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if progress:
            what = f"train loss {loss:.3f} top1 {acc.tolist()[0]:.2f}"
            progress.update(task, completed=step, description=what)
        if step % ckpt_every == 0 or step == steps or stopped:
            counters = (step, epoch, taken, best, best_state, stale)
            _save(ckpt, spec, opt, sched, counters, settings)
    log.close()
    if best_state is not None:  # the weights of the best held-out evaluation
        spec.module.load_state_dict(best_state)
    final = final_evaluation(spec, step, epoch, stopped, best, t0)
    final.update(precision=precision, stream={"epoch": epoch, "taken": taken})
    (out / "eval.json").write_text(json.dumps(final, indent=2))
    return final


def _judge(spec, eval_batches: int, best: float, best_state, stale: int):
    """The held-out evaluation → (its result, the best loss so far, the best weights so far,
    evaluations since the best)."""
    result = evaluate(spec, max_batches=eval_batches)
    held = held_out_loss(result)
    if held < best:
        return result, held, copy.deepcopy(spec.module.state_dict()), 0
    return result, best, best_state, stale + 1


def _optimizer(spec, schedule: Schedule):
    """(trainable parameters, AdamW without weight decay, the schedule's rate: a linear warm-up,
    then its cosine, train/schedule.py)."""
    params = [p for p in spec.module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=schedule.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule.factor)
    return params, opt, sched


def _stream(spec, seed: int, epoch: int, taken: int):
    """Training batches from batch `taken` of `epoch` on (those before it were used before a
    checkpoint), epoch after epoch → (batch, its epoch, batches taken from that epoch)."""
    batches = _epoch(spec, seed, epoch)
    for _ in range(taken):
        next(batches)
    while True:
        for batch in batches:
            taken += 1
            yield batch, epoch, taken
        if taken == 0:
            raise ValueError("the training split yields no batch: too little data")
        epoch, taken = epoch + 1, 0
        batches = _epoch(spec, seed, epoch)


def _update(spec, batch, params, opt, sched, precision="float32") -> tuple[float, torch.Tensor]:
    """One optimizer step on `batch` (gradients clipped to norm 1) → (loss, top-1 by position);
    the forward and the loss in `precision` (autocast), the backward and the step as the
    weights are, float32."""
    with autocast(precision):
        loss, _, acc = spec.step_loss(batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()
    return float(loss.detach()), acc


COUNTERS = ("step", "epoch", "taken", "best", "best_state", "stale")  # a checkpoint's progress


def check_resume(out: Path, settings: dict | None) -> None:
    """Stop with one line if `out`'s checkpoint was written by a run given other settings than
    `settings` (None: no check). Nothing is changed: the checkpoint stays as it is."""
    ckpt = out / "checkpoint.pt"
    if settings is None or not ckpt.exists():
        return
    had = torch.load(ckpt, weights_only=False, mmap=True).get("settings")
    if had == settings:
        return
    if had is None:
        what = "a run that did not record its settings"
    else:
        a, b = _flat(had), _flat(settings)
        diff = sorted(k for k in a.keys() | b.keys() if a.get(k, "-") != b.get(k, "-"))
        shown = ", ".join(f"{k} {a.get(k, '-')!r} → {b.get(k, '-')!r}" for k in diff[:4])
        what = f"other settings ({shown}{', ...' if len(diff) > 4 else ''})"
    raise UserError(
        f"the checkpoint {ckpt} was written by {what}; it is left as it is: run with the same "
        "settings to resume it, or with resume=false to train afresh (it is then overwritten)"
    )


def _flat(d, prefix: str = "") -> dict:
    """{'a.b': value} for a nested dict of settings."""
    flat = {}
    for k, v in d.items():
        if isinstance(v, dict):
            flat.update(_flat(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def _restore(ckpt: Path, spec, opt, sched) -> tuple:
    """The module, optimizer, schedule and RNG as the checkpoint left them; its counters."""
    state = torch.load(ckpt, weights_only=False)
    spec.module.load_state_dict(state["module"])
    opt.load_state_dict(state["opt"])
    sched.load_state_dict(state["sched"])
    torch.set_rng_state(state["rng"])
    return tuple(state[k] for k in COUNTERS)


def _save(ckpt: Path, spec, opt, sched, counters: tuple, settings: dict | None = None) -> None:
    state = {"module": spec.module.state_dict(), "opt": opt.state_dict(), "settings": settings}
    state.update(
        sched=sched.state_dict(), rng=torch.get_rng_state(), **dict(zip(COUNTERS, counters))
    )
    torch.save(state, ckpt)


def final_evaluation(spec, step: int, epoch: int, stopped, best: float, t0: float) -> dict:
    """The held-out evaluation of the final weights, beside the same measures on training
    batches (their gap: overfitting) and the run's counters."""
    final = evaluate(spec)
    train_view = evaluate(spec, max_batches=final.get("batches"), split="train")
    final.update(
        train_top1_per_pos=train_view.get("top1_per_pos"),
        train_loss_per_pos=train_view.get("loss_per_pos"),
        steps=step,
        epochs_completed=epoch,
        stopped_early_at=stopped,
        best_held_out_loss=best,
        train_seconds=round(time.time() - t0, 1),  # the evaluations included
    )
    if final.get("top1_per_pos") and final.get("train_top1_per_pos"):
        final["train_minus_held_out_top1"] = [
            round(a - b, 4) for a, b in zip(final["train_top1_per_pos"], final["top1_per_pos"])
        ]
    return final
