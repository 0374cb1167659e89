"""Run outputs: records.jsonl (one line per prompt × turn × role × repeat), env.json, config.

Records are appended and flushed prompt by prompt, so nothing measured is lost if a run stops.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

MB = 1e6


def record(runner, prompt, method, role, repeat, turn, prompt_ids, res, peak, verdict) -> dict:
    t = res.times_ns
    new = len(res.output_ids)
    wall = t["wall"] / 1e9
    ttft = t.get("ttft", 0) / 1e9
    cfg = runner.cfg
    return {
        "task": prompt.task, "category": prompt.category, "subcategory": prompt.subcategory,
        "prompt_id": prompt.id, "turn": turn, "repeat": repeat, "role": role,
        "method": runner.method.name, "method_run": method.name, "k": runner.k,
        "temperature": float(cfg.temperature), "top_k": int(cfg.top_k), "top_p": float(cfg.top_p),
        "device": runner.device.type, "dtype": runner.choice["dtype"],
        "engine": runner.choice["engine"], "weights": runner.choice["weights"],
        "model": cfg.model.name,
        "prompt_tokens": res.n_prompt, "new_tokens": new, "stop": res.stop,
        "wall_s": wall, "prefill_s": t["prefill"] / 1e9, "draft_s": t["draft"] / 1e9,
        "verify_s": t["verify"] / 1e9, "other_s": t["other"] / 1e9, "ttft_s": ttft,
        "tpot_s": (wall - ttft) / (new - 1) if new > 1 else None,
        "target_forwards": res.target_forwards, "accept_lengths": res.accept_lengths,
        "drafted_tokens": res.drafted_tokens, "accepted_tokens": res.accepted_tokens,
        "drafted_per_pos": res.drafted_per_pos, "accepted_per_pos": res.accepted_per_pos,
        "extra_mb": res.extra_bytes / MB,
        "peak_mem_delta_mb": peak / MB if peak is not None else None,
        "verdict": verdict.get("verdict"), "first_divergence": verdict.get("first_divergence"),
        "logit_gap": verdict.get("logit_gap"), "method_gap": verdict.get("method_gap"),
        "dist_pvalue": verdict.get("dist_pvalue"),
        "output_ids": res.output_ids,
    }


def git_sha() -> str | None:
    try:
        here = Path(__file__).resolve().parent.parent
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def env_info(runner) -> dict:
    import transformers
    dev = runner.device
    return {
        "python": sys.version.split()[0], "torch": torch.__version__,
        "transformers": transformers.__version__, "platform": platform.platform(),
        "device": dev.type, "cpu": cpu_name(), "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "git_sha": git_sha(), "model": str(runner.cfg.model.target),
        "dtype": runner.choice["dtype"], "engine_choice": runner.choice,
        "target_weight_mb": runner.target.weight_bytes() / MB,
        "method_extra_mb": runner.method.extra_bytes() / MB,
        "method_info": getattr(runner.method, "info", {}),
        "cost_curve_ms": {q: round(c * 1e3, 3) for q, c in runner.cost_curve.items()},
    }


class RecordWriter:
    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.dir = out
        self.path = out / "records.jsonl"
        self.f = open(self.path, "a", encoding="utf-8")

    def write_env(self, runner) -> None:
        from omegaconf import OmegaConf
        (self.dir / "env.json").write_text(json.dumps(env_info(runner), indent=2))
        resolved = {k: runner.choice[k] for k in ("engine", "weights", "dtype", "kernel")}
        (self.dir / "config.yaml").write_text(OmegaConf.to_yaml(runner.cfg) +
                                              "# resolved on this machine (env.json says why)\n" +
                                              OmegaConf.to_yaml({"resolved": resolved}))

    def write(self, row: dict) -> None:
        self.f.write(json.dumps(row) + "\n")
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def load(path: Path):
    import pandas as pd
    return pd.read_json(path, lines=True)
