"""Saved EAGLE heads (or draft models) side by side on the same held-out split: top-1 per
draft position.

    python -m train.evaluate drafter=eagle3 limit=6400 +heads=[OLD_DIR,NEW_DIR]
    python -m train.evaluate drafter=draft limit=3200 +heads=[OLD_DIR,NEW_DIR]

The data is the training command's own (same prompts, limit, ids and cached states; the split by
prompt id, so a head never saw the held-out prompts whatever data it was trained on); each head is
loaded as `drafter.init` loads it (train.eagle_spec, train.specs) and evaluated by train.loop's
`evaluate` on the whole held-out split, greedy and sampled answers together and apart, and
source by source (train.tally maps a source to its category). Misses
outside a head's draft vocabulary count as misses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from groundfloor.errors import UserError
from groundfloor.models import load_model
from train import loop
from train.__main__ import spec_class, training_data


def run(cfg: DictConfig) -> dict:
    heads = list(cfg.get("heads") or [])
    if not heads:
        raise UserError("+heads=[dir, ...] names no head to evaluate")
    data, _ = training_data(cfg)
    target, _ = load_model(cfg.target, torch.device("cpu"), getattr(torch, cfg.dtype))
    out = {}
    for head in heads:
        cfg.drafter.init = str(Path(str(head)).resolve())
        spec = spec_class(cfg).from_config(data, target, cfg)
        result = {"all": loop.evaluate(spec)}
        held = spec.seqs["eval"]
        for name, keep in (("greedy", 0.0), ("sampled", 1.0)):
            result[name] = _on(spec, held, lambda s: float(s.get("temperature", 0)) == keep)
        by_source = {
            src: _on(spec, held, lambda s: str(s.get("source", "")) == src)
            for src in sorted({str(s.get("source", "")) for s in held})
        }
        spec.seqs["eval"] = held
        out[str(head)] = {**result, "by_source": by_source}
        tops = {k: [round(x, 3) for x in v.get("top1_per_pos", [])] for k, v in result.items()}
        print(f"{head}: held-out top-1 by draft position {json.dumps(tops)}")
        firsts = {k: round(v["top1_per_pos"][0], 3) for k, v in by_source.items()}
        print(f"{head}: held-out top-1 at the first draft position by source {json.dumps(firsts)}")
    return out


def _on(spec, held: list[dict], keep) -> dict:
    """train.loop's evaluate over the held-out sequences `keep` selects, with their count."""
    spec.seqs["eval"] = [s for s in held if keep(s)]
    return {**loop.evaluate(spec), "sequences": len(spec.seqs["eval"])}


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> None:
    OmegaConf.set_struct(cfg, False)
    try:
        run(cfg)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
