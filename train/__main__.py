"""Train a drafter: `python -m train drafter=medusa [key=value ...]` (Hydra).

1. self-distillation data (cached): the target answers the training prompts;
2. training with checkpoints (resumed when present) and a held-out evaluation;
3. the artifact in its published layout under `out` (default artifacts/<model>/<drafter>/).
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

from groundfloor.errors import UserError
from groundfloor.progress import progress_bar


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
    from train import distill
    from train.sources import from_config, prompt_sets

    data, stats = [], {}
    for part in prompt_sets(cfg):
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
            states_engine=dict(part.get("states_engine") or {}),
        )
        stats.update(counts)
    return data, stats


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


def run(cfg: DictConfig) -> None:

    from groundfloor.models import load_model
    from train import loop

    name = cfg.drafter.name
    spec_cls = spec_class(cfg)
    work = Path(HydraConfig.get().runtime.output_dir)
    out = Path(cfg.out)
    settings = resume_settings(cfg)
    if cfg.resume:
        loop.check_resume(work, settings)
    t0 = time.time()
    with progress_bar(transient=False) as progress:
        data, stats = training_data(cfg, progress)
        t_data = time.time() - t0
        target, _ = load_model(cfg.target, torch.device("cpu"), getattr(torch, cfg.dtype))
        d = cfg.drafter
        torch.manual_seed(int(cfg.seed))  # the drafter's initial weights come from this seed
        spec = spec_cls.from_config(data, target, cfg)
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
        )
    spec.save(out, result)
    (out / "train_config.yaml").write_text(OmegaConf.to_yaml(cfg))
    summary = {
        "drafter": name,
        "data_seconds": round(t_data, 1),
        "total_seconds": round(time.time() - t0, 1),
        "prompt_sources": stats,
        "sequences": len(data),
        **result,
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
    from groundfloor.paths import check_group_values

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
