"""Synthetic run directories, as `python -m bench` writes them, for the report and gate tests.

Records are generated from a known τ and speed per method (ar is the baseline on every run),
then summary.csv comes from the real `bench.outputs.metrics.summarize`, so the report reads
exactly the files a real run leaves behind, in milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.outputs.metrics import summarize

TASKS = ("code", "dialog")


def _rec(
    task,
    pid,
    turn,
    rep,
    role,
    method,
    k,
    temp,
    device,
    new,
    fwd,
    wall,
    drafted,
    accepted,
    dpp,
    app,
    verdict,
    extra=0.0,
    divergence=None,
):
    rounds = fwd - 1  # every forward after the prefill verifies one round
    acc = max(new - 1 - rounds, 0) if drafted else 0
    per_round = [acc // rounds + (i < acc % rounds) for i in range(rounds)] if rounds else []
    return {
        "task": task,
        "category": task,
        "subcategory": "",
        "prompt_id": pid,
        "turn": turn,
        "repeat": rep,
        "role": role,
        "method": method,
        "method_run": method if role == "method" else "ar",
        "k": k,
        "temperature": temp,
        "top_k": 0,
        "top_p": 1.0,
        "device": device,
        "dtype": "float32",
        "model": "tiny",
        "prompt_tokens": 40,
        "new_tokens": new,
        "stop_reason": "budget",
        "loop": False,
        "wall_s": wall,
        "prefill_s": 0.2 * wall,
        "draft_s": 0.1 * wall if drafted else 0.0,
        "verify_s": 0.6 * wall if drafted else 0.75 * wall,
        "other_s": 0.1 * wall if drafted else 0.05 * wall,
        "ttft_s": 0.2 * wall,
        "tpot_s": 0.8 * wall / (new - 1),
        "target_forwards": fwd,
        "accept_lengths": [1] * fwd,
        "round_accepted": per_round if drafted else [],
        "round_depth": [max(int(k), 1)] * rounds if drafted else [],
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "drafted_per_pos": dpp,
        "accepted_per_pos": app,
        "static_mb": extra,
        "peak_mem_delta_mb": 1.0,
        "verdict": verdict,
        "first_divergence": divergence,
        "logit_gap": 0.8 if divergence else None,
        "method_gap": 0.6 if divergence else None,
        "dist_pvalue": None,
        "output_ids": [5] * new,
    }


def make_run(
    out: Path,
    method: str,
    k: int,
    temperature: float = 0.0,
    device: str = "cpu",
    model: str = "embedded:smollm2-135m",
    tau: float = 2.0,
    speedup: float = 1.5,
    prompts: int = 3,
    repeats: int = 2,
    seed: int = 0,
    mismatch: bool = False,
    extra_mb: float = 0.0,
    gpu: str | None = None,
    fields: dict | None = None,
    base_rate: float = 20.0,
) -> Path:
    """A run dir for `method` with the given τ and speedup over ar, on two tasks; `fields` set
    on every record (and `weights` into env.json's engine_choice), the baseline at `base_rate`
    tokens/s."""
    rng = np.random.default_rng(seed)
    rows = []
    for task in TASKS:
        for p in range(prompts):
            pid = f"{task}-{p}"
            for rep in range(repeats):
                new = 40
                base_wall = new / base_rate * rng.uniform(0.95, 1.05)
                rows.append(
                    _rec(
                        task,
                        pid,
                        0,
                        rep,
                        "baseline",
                        method,
                        k,
                        temperature,
                        device,
                        new,
                        new,
                        base_wall,
                        0,
                        0,
                        [],
                        [],
                        None,
                    )
                )
                fwd = max(1, round(new / tau))
                drafted = (fwd - 1) * k
                accepted = new - fwd
                dpp = [fwd - 1] * k
                app = [round((fwd - 1) * 0.9 ** (i + 1)) for i in range(k)]
                diverged = mismatch and p == 0
                verdict = None if temperature > 0 else "mismatch" if diverged else "exact"
                rows.append(
                    _rec(
                        task,
                        pid,
                        0,
                        rep,
                        "method",
                        method,
                        k,
                        temperature,
                        device,
                        new,
                        fwd,
                        base_wall / speedup * rng.uniform(0.95, 1.05),
                        drafted,
                        accepted,
                        dpp,
                        app,
                        verdict,
                        extra_mb,
                        7 if diverged else None,
                    )
                )
    rows = [{**r, **(fields or {})} for r in rows]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "records.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    summarize(pd.DataFrame(rows)).to_csv(out / "summary.csv", index=False)
    (out / "env.json").write_text(
        json.dumps(
            {
                "device": device,
                "cpu": "Test CPU",
                "cpu_count": 2,
                "gpu": gpu,
                "model": model,
                "dtype": "float32",
                "torch": "2.13.0",
                "transformers": "5.24.0",
                "git_sha": "abc",
                **(
                    {"engine_choice": {"engine": "lean", "weights": fields["weights"]}}
                    if fields and "weights" in fields
                    else {}
                ),
            }
        )
    )
    (out / "config.yaml").write_text(
        f"method:\n  name: {method}\n  k: {k}\nmodel:\n  target: {model}\n  dtype: float32\n"
        f"task:\n  name: core\nk: {k}\ntemperature: {temperature}\nmax_new_tokens: 40\n"
        f"limit: {prompts}\nrepeats: {repeats}\n"
    )
    return out


def make_sweep(root: Path) -> Path:
    """A sweep like `-m method=ar,ngram,draft k=2,4 temperature=0,1` on cpu, plus a cuda run."""
    n = 0
    for method, tau, speed, extra in (
        ("ar", 1.0, 1.0, 0.0),
        ("ngram", 2.0, 1.6, 0.0),
        ("draft", 3.0, 2.0, 120.0),
    ):
        for k in (0,) if method == "ar" else (2, 4):
            for temp in (0.0, 1.0):
                t = tau if method == "ar" else min(k + 1, tau * (1 + k / 8)) * (1 - 0.2 * temp)
                make_run(
                    root / "sweep" / f"{n}_{method}",
                    method,
                    k,
                    temp,
                    tau=t,
                    speedup=speed * t / tau,
                    seed=n,
                    extra_mb=extra,
                    mismatch=(method == "draft" and k == 4 and temp == 0),
                )
                n += 1
    for method, speed in (("ar", 1.0), ("ngram", 1.3)):
        make_run(
            root / "gpu" / method,
            method,
            0 if method == "ar" else 4,
            device="cuda",
            gpu="NVIDIA H100 80GB HBM3",
            tau=1.0 if method == "ar" else 2.4,
            speedup=speed,
            seed=100 + n,
        )
        n += 1
    return root
