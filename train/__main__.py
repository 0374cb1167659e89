"""Train a drafter: `python -m train drafter=medusa [key=value ...]` (Hydra).

1. self-distillation data (cached): the target answers the training prompts;
2. training with checkpoints (resumed when present) and a held-out evaluation;
3. the artifact in its published layout under `out` (default artifacts/<model>/<drafter>/).
The target's hidden states the heads read are the `states_target`'s (default: the 16-bit copy),
computed on the fly where the local cache lacks a shard (train/states.py); the training precision
is `precision` (auto: bfloat16 autocast where the CPU computes it natively, train/loop.py). Both,
and why, are printed and kept in train_summary.json.
Checkpoints and logs go to the Hydra run dir under $SPECSWEEP_CACHE/train/<drafter>/; a run
resumes the checkpoint there only if it was written with the same settings (the step count and
checkpoint interval aside), and says so before any data is built otherwise.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from engines.cpu import cpu_kind
from groundfloor.errors import UserError
from groundfloor.models import load_model
from groundfloor.paths import check_group_values
from groundfloor.progress import progress_bar
from train import distill, loop, schedule, states
from train.sources import from_config, prompt_sets
from train.specs import is_heldout


def spec_class(cfg):
    """The training spec conf/drafter/<name>.yaml names in `_target_` (train.specs,
    train.eagle_spec): its `needed_layers(cfg)` and `from_config(data, target, cfg)`."""
    from hydra.utils import get_class

    where = f"drafter={cfg.drafter.name}"
    if not cfg.drafter.get("_target_"):
        raise UserError(f"{where} names no training spec (_target_ in conf/drafter/)")
    try:
        return get_class(str(cfg.drafter._target_))
    except Exception as e:
        raise UserError(f"{where}: cannot import {cfg.drafter._target_!r} ({e})")


def needed_layers(cfg) -> list[int]:
    """The target hidden states a drafter trains on (the data keeps cfg.layers)."""
    return spec_class(cfg).needed_layers(cfg)


def training_data(cfg, progress=None) -> tuple[list[dict], dict]:
    """(sequences with the hidden states the drafter needs, prompt counts per source): the
    self-distillation data of each of the config's prompt sets, built or read from the cache,
    one after the other."""
    data, stats = [], {}
    parts = prompt_sets(cfg)
    engines = [states_engine(part) for part in parts]  # a bad value stops before any build
    for part, how in zip(parts, engines):
        rows, counts = from_config(part)
        data += distill.build(
            str(cfg.target),
            rows,
            int(cfg.max_new_tokens),
            list(cfg.layers),
            distill.settings_of(part),
            distill.batch_of(part),
            progress,
            need=needed_layers(cfg),
            states_engine=how,
            lazy=True,  # each shard's states when training first reads it
        )
        stats.update(counts)
    return data, stats


STATES_TARGETS = {  # states_target: the states engine's weights (engines/load.py) → what it is
    "bfloat16": "the 16-bit target: the embedded GGUF dequantized and rounded to bfloat16 once",
    "auto": "the target as shipped and benchmarked by default: the embedded GGUF's 4-bit blocks",
    "float32": "the target's values exactly, in float32 (the answers' engine by default)",
}


def states_target(part) -> str:
    """Whose states a prompt set (or the config) names: `states_target`, the 16-bit copy where a
    set built outside conf/train.yaml leaves it out."""
    return str(part.get("states_target") or "bfloat16")


def states_engine(part) -> dict:
    """The engine keys the states of a prompt set are computed with in place of its answers'
    (train.distill.build's states_engine): `states_engine`'s, with `states_target` as the
    weights. One line where the two name different weights, or the target is unknown."""
    target = states_target(part)
    if target not in STATES_TARGETS:
        raise UserError(
            f"states_target={target!r} is not valid; choose one of: {', '.join(STATES_TARGETS)}"
        )
    how = {str(k): str(v) for k, v in (part.get("states_engine") or {}).items()}
    if how.get("weights", target) != target:
        raise UserError(
            f"states_engine.weights={how['weights']!r} and states_target={target!r} name "
            "different targets for the states; name it by states_target alone"
        )
    return {**how, "weights": target}


def trained_on(cfg, why: str) -> dict:
    """The summary's record of how the head was trained: why its precision, on which CPU (the
    instruction set behind `precision` auto), on whose states."""
    return {"precision_reason": why, "cpu": cpu_kind(), "states": states_summary(cfg)}


def states_summary(cfg) -> dict:
    """Whose states the heads trained on: the states target, the engine keys and the folder key
    per prompt set, and what this run computed on the fly."""
    target = states_target(cfg)
    hows = []
    for part in prompt_sets(cfg):
        how = {**distill.settings_of(part), **states_engine(part)}
        keys = {k: how.get(k, "auto") for k in states.ENGINE_KEYS}
        hows.append({**keys, "key": states.engine_key(how)})
    return {
        "target": target,
        "what": STATES_TARGETS.get(target, target),
        "engines": hows,
        "computed_here": {k: round(v, 1) for k, v in states.TALLY.items()},
    }


def resume_settings(cfg: DictConfig) -> dict:
    """What a checkpoint must have been trained with to be resumed: the resolved config but for
    where the artifact goes, whether to resume, the step count (a run may be extended) and the
    checkpoint interval."""
    settings = OmegaConf.to_container(cfg, resolve=True)
    for key in ("out", "resume"):
        settings.pop(key, None)
    for key in ("steps", "ckpt_every"):
        settings["drafter"].pop(key, None)
    return settings


def how_trained(cfg) -> tuple[str, str]:
    """The training precision and why (train.loop.resolve_precision), the states target
    checked: one line for a bad value of either before any data is built; both printed."""
    precision, why = loop.resolve_precision(str(cfg.get("precision") or "auto"))
    for part in prompt_sets(cfg):
        states_engine(part)
    target = states_target(cfg)
    print(
        f"training precision: {precision} ({why}); states of: {target} ({STATES_TARGETS[target]})",
        file=sys.stderr,
    )
    return precision, why


def sitting_schedule(cfg, spec, data: list[dict]) -> schedule.Schedule:
    """This sitting's schedule (train/schedule.py: `schedule` new or continue), printed."""
    d = cfg.drafter
    kind = str(cfg.schedule)
    counted = getattr(spec, "epoch_batches", None)
    if kind == "continue" and counted is None:
        raise UserError(
            f"drafter={d.name}'s training spec does not count its batches (epoch_batches): "
            "schedule=continue needs it; use schedule=new"
        )
    train_ids = [x["id"] for x in data if not is_heldout(x["id"], float(cfg.holdout))]
    key = schedule.data_key(train_ids, int(cfg.seed), int(d.batch_size))
    batches = counted() if counted else 1
    sched, line = schedule.plan(
        kind,
        d.get("init"),
        int(d.steps),
        float(d.lr),
        int(d.warmup),
        float(cfg.epochs),
        batches,
        key,
    )
    print(line, file=sys.stderr)
    return sched


def sitting(result: dict, why: str) -> dict:
    """One sitting's record in the schedule: its held-out curve's end, machine and precision."""
    return {
        "best_held_out_loss": result.get("best_held_out_loss"),
        "held_out_top1": result.get("top1_per_pos"),
        "precision": result.get("precision"),
        "precision_reason": why,
        "cpu": cpu_kind(),
        "train_seconds": result.get("train_seconds"),
    }


def run(cfg: DictConfig) -> None:

    spec_cls = spec_class(cfg)
    work = Path(HydraConfig.get().runtime.output_dir)
    out = Path(cfg.out)
    settings = resume_settings(cfg)
    if cfg.resume:
        loop.check_resume(work, settings)
    precision, why = how_trained(cfg)
    t0 = time.time()
    with progress_bar(transient=False) as progress:
        data, stats = training_data(cfg, progress)
        t_data = time.time() - t0
        target, _ = load_model(cfg.target, torch.device("cpu"), getattr(torch, cfg.dtype))
        d = cfg.drafter
        torch.manual_seed(int(cfg.seed))  # the drafter's initial weights come from this seed
        spec = spec_cls.from_config(data, target, cfg)
        sched = sitting_schedule(cfg, spec, data)
        result = loop.train(
            spec,
            work,
            int(d.steps),
            float(d.lr),
            int(d.warmup),
            int(d.ckpt_every),
            int(d.eval_every),
            int(cfg.seed),
            bool(cfg.resume),
            progress,
            d.patience,
            int(d.eval_batches),
            settings,
            precision,
            sched,
        )
    spec.save(out, result)
    (out / "train_config.yaml").write_text(OmegaConf.to_yaml(cfg))
    summary = {
        "drafter": cfg.drafter.name,
        "data_seconds": round(t_data, 1),
        "total_seconds": round(time.time() - t0, 1),
        "prompt_sources": stats,
        "sequences": len(data),
        **result,
        **trained_on(cfg, why),
        "schedule": sched.after(result["steps"], **result["stream"], sitting=sitting(result, why)),
        "artifact_bytes": sum(f.stat().st_size for f in out.iterdir()),
    }
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def check_drafter(argv: list[str]) -> None:
    """One clear line for an unknown drafter, before Hydra's multi-line error."""
    for arg in argv:
        if arg.startswith("drafter="):
            try:
                check_group_values("drafter", arg.split("=", 1)[1])
            except UserError as e:
                print(f"error: {e}", file=sys.stderr)
                sys.exit(2)


if __name__ == "__main__":
    check_drafter(sys.argv[1:])
    main()
