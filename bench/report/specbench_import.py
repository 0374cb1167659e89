"""Spec-Bench answer files (model_answer JSONL) as report cells, beside our own runs.

One JSON line per question:
    {"question_id", "category", "model_id", "choices": [{"turns", "new_tokens": [per turn],
     "wall_time": [per turn], "accept_lengths": [per step, over the turns], ...}], ...}
(a list per turn is read too)
The baseline is named by the user; per method file, over the question ids both files hold:
    speedup = (Σ new tokens ÷ Σ wall time)_method ÷ (Σ new tokens ÷ Σ wall time)_baseline
              95% interval: percentile bootstrap over questions
              (groundfloor.stats.bootstrap_ratio)
    speedup_specbench = mean over questions of tokens/s, method over baseline (Spec-Bench's
              evaluation/speed.py, without its recount of the baseline's tokens from the text)
    τ_round = Σ accept lengths ÷ number of decoding steps (Spec-Bench's mean accepted tokens,
              stored as tau_round, our name for it); Σ new tokens ÷ Σ decoding_steps when
              accept_lengths is absent
Categories map onto our task names (tasks.specbench.map_category); task='all' pools them.
Imported cells form their own group (model, device, dtype, 'spec-bench import'): their clock,
prompts and hardware are not ours, so they are never pooled with our runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from bench.outputs.metrics import COLUMNS
from bench.report.runs import group_label
from groundfloor.errors import UserError
from groundfloor.stats import bootstrap_ratio
from tasks.specbench import map_category


def read_answers(path: Path) -> pd.DataFrame:
    """One row per question: task, new_tokens, wall_s, accepted (Σ accept lengths), steps."""
    rows = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UserError(f"cannot read Spec-Bench answer file {str(path)!r} ({e.strerror})")
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            choice = row["choices"][0]
            new = [int(n) for n in choice["new_tokens"]]
            wall = [float(w) for w in choice["wall_time"]]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as e:
            raise UserError(
                f"{path}:{no}: not a Spec-Bench answer line "
                f"(needs choices[0].new_tokens and wall_time; {type(e).__name__}: {e})"
            )
        acc = choice.get("accept_lengths") or []
        flat = [int(a) for turn in acc for a in (turn if isinstance(turn, list) else [turn])]
        steps = choice.get("decoding_steps")
        steps = sum(steps) if isinstance(steps, list) else steps
        rows.append(
            {
                "question_id": str(row.get("question_id")),
                "task": map_category(str(row.get("category", "unknown"))),
                "model_id": str(row.get("model_id", "")),
                "new_tokens": sum(new),
                "wall_s": sum(wall),
                "accepted": sum(flat) if flat else sum(new),
                "steps": len(flat) if flat else (steps or math.nan),
            }
        )
    if not rows:
        raise UserError(f"Spec-Bench answer file {str(path)!r} holds no answers")
    df = pd.DataFrame(rows)
    return df.drop_duplicates("question_id", keep="last").set_index("question_id")


def _cell(m: pd.DataFrame, b: pd.DataFrame) -> dict:
    tps = m.new_tokens.sum() / m.wall_s.sum()
    btps = b.new_tokens.sum() / b.wall_s.sum()
    lo, hi = bootstrap_ratio(m.new_tokens, m.wall_s, b.new_tokens, b.wall_s)
    ok = m.steps.notna() & (m.steps > 0)
    tau, tlo, thi = math.nan, math.nan, math.nan
    if ok.any():
        acc, steps = m.accepted[ok].to_numpy(float), m.steps[ok].to_numpy(float)
        tau = acc.sum() / steps.sum()
        ones = np.ones(len(acc))
        tlo, thi = bootstrap_ratio(acc, steps, ones, ones)
    return {
        "n_prompts": len(m),
        "new_tokens": int(m.new_tokens.sum()),
        "tokens_per_s": tps,
        "baseline_tokens_per_s": btps,
        "speedup": tps / btps,
        "speedup_ci_low": lo,
        "speedup_ci_high": hi,
        # Spec-Bench's own statistic (its baseline tokens as the file records them: the report
        # has no tokenizer to recount the answer text)
        "speedup_specbench": float(
            (m.new_tokens / m.wall_s).mean() / (b.new_tokens / b.wall_s).mean()
        ),
        "tau_round": tau,  # Spec-Bench's "mean accepted tokens": per decoding step
        "tau_round_ci_low": tlo,
        "tau_round_ci_high": thi,
    }


def import_cells(
    baseline: Path,
    methods: list[tuple[str, Path]],
    model: str | None = None,
    device: str = "unknown device",
    dtype: str = "unknown dtype",
) -> pd.DataFrame:
    """Report cells (same columns as runs.load_runs' cells) for each method file vs the baseline.

    The baseline itself is listed as method 'baseline' (speedup 1 on its own questions)."""
    base = read_answers(baseline)
    model = model or (base.model_id.iloc[0] or Path(baseline).stem)
    group = group_label(model, device, dtype, source="spec-bench")
    rows = []
    for name, path in [("baseline", baseline), *methods]:
        m = base if path == baseline else read_answers(path)
        common = m.index.intersection(base.index)
        if common.empty:
            raise UserError(f"{path} and the baseline {baseline} share no question_id")
        m, b = m.loc[common], base.loc[common]
        tasks = sorted(m.task.unique())
        scopes = [(t, m.task == t) for t in tasks] + (
            [("all", m.task.notna())] if len(tasks) > 1 else []
        )
        for task, sel in scopes:
            row = {c: None for c in COLUMNS}
            row.update(
                {
                    "task": task,
                    "method": name,
                    "k": math.nan,
                    "temperature": math.nan,
                    "device": device,
                    "dtype": dtype,
                }
            )
            row.update(_cell(m[sel], b[sel]))
            row.update(
                {
                    "group": group,
                    "source": "spec-bench",
                    "model": model,
                    "device_name": device,
                    "run": str(path),
                    "settings": f"Spec-Bench answers, {len(common)} questions",
                }
            )
            rows.append(row)
    return pd.DataFrame(rows)


def parse_method_args(values: list[str]) -> list[tuple[str, Path]]:
    """`NAME=FILE` or `FILE` (name: the file's stem) → [(name, path)]."""
    out = []
    for v in values:
        name, _, path = v.partition("=") if "=" in v else (Path(v).stem, "", v)
        out.append((name, Path(path)))
    return out
