"""What the gate keeps of one measured cell, unit by unit (a unit: one prompt × turn).

log_ratio   log of the unit's pair ratio (method tokens/s ÷ baseline tokens/s, the median
            over its quiet pairs: bench.outputs.metrics.unit_speed), the speedup's per-unit sample
repeats     the log pair ratio of each planned repeat (extra re-measured rounds left out):
            their spread is the run-to-run noise the power check simulates from
new_tokens, forwards   the method's repeat-0 tokens and target forwards (τ = Σ new ÷ Σ fwd)
ids         the method's repeat-0 output ids; `reference` the baseline side's
"""

from __future__ import annotations

import math

import pandas as pd

from bench.outputs.metrics import pairs, unit_speed


def unit_key(prompt_id: str, turn: int) -> str:
    return f"{prompt_id}/{int(turn)}"


def units_of(records: pd.DataFrame) -> dict[str, dict]:
    """{unit key: the fields above} from one cell's records.jsonl rows."""
    method = records[records.role == "method"]
    base = records[records.role == "baseline"]
    speed = unit_speed(method, base)
    planned = lambda df: df[~df.extra_round.astype(bool)] if "extra_round" in df else df  # noqa: E731
    both = pairs(planned(method), planned(base), extra=["target_forwards", "output_ids"])
    out: dict[str, dict] = {}
    for row in speed.itertuples():
        key = unit_key(row.prompt_id, row.turn)
        mine = both[(both.prompt_id == row.prompt_id) & (both.turn == row.turn)]
        mine = mine.sort_values("repeat")
        first = mine.iloc[0]
        out[key] = {
            "log_ratio": math.log(row.ratio),
            "repeats": [math.log(r) for r in mine.ratio],
            "new_tokens": int(first.new_tokens_m),
            "forwards": int(first.target_forwards_m),
            "ids": [int(t) for t in first.output_ids_m],
            "reference": [int(t) for t in first.output_ids_b],
        }
    return out


def stored(units: dict[str, dict]) -> dict[str, dict]:
    """What the baseline file keeps per unit of a method (the output ids are kept once per
    machine, from the reference side: see bench.gate.run)."""
    keep = ("log_ratio", "repeats", "new_tokens", "forwards")
    return {
        u: {k: (round(v, 6) if k == "log_ratio" else v) for k, v in d.items() if k in keep}
        | {"repeats": [round(x, 6) for x in d["repeats"]], "exact": d["ids"] == d["reference"]}
        for u, d in units.items()
    }
