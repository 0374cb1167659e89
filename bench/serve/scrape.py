"""Server-side speculation counters from Prometheus `/metrics`, read before and after a pass.

The exposition format is one sample a line, `name{label="v",...} value`; counters may carry a
`_total` suffix. A server's names map onto ours (`server.metrics` picks the map):

    ours               vLLM (counters)
    drafts             vllm:spec_decode_num_drafts
    draft_tokens       vllm:spec_decode_num_draft_tokens
    accepted_tokens    vllm:spec_decode_num_accepted_tokens
    accepted_per_pos   vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}
    generated_tokens   vllm:generation_tokens (SGLang: sglang:generation_tokens)

SGLang publishes gauges instead, `sglang:spec_accept_length` (mean tokens per verify forward:
our τ over decode steps) and `sglang:spec_accept_rate` (α); they are read after the pass and
reported as they are (`source: gauge`: a recent-window value, not this pass's exact total).

Samples of one name are summed over their other labels (engines, model names). The difference
after − before covers exactly the pass's requests when nothing else talks to the server (the
suite starts its own). From it, with N generated tokens and A accepted draft tokens, every
target forward emits one token of its own plus its accepted drafts, so

    target forwards = N − A,   τ = N ÷ (N − A),   α = A ÷ draft tokens,
    α_i = accepted at position i ÷ drafts           (a draft proposes every position)

the same definitions as in-process (bench/outputs/metrics.py). A server without these counters
(llama.cpp) yields None: τ and α are then not claimed.
"""

from __future__ import annotations

import re

NAMES = {
    "vllm": {
        "drafts": "vllm:spec_decode_num_drafts",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens",
        "accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
        "accepted_per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos",
        "generated_tokens": "vllm:generation_tokens",
    },
    "sglang": {
        "accept_length": "sglang:spec_accept_length",  # gauges: read, not differenced
        "accept_rate": "sglang:spec_accept_rate",
        "generated_tokens": "sglang:generation_tokens",
    },
    "none": {},
}
LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
POSITION_LABELS = ("position", "pos")


def parse(text: str) -> list[tuple[str, dict, float]]:
    """(name, labels, value) for every sample line of an exposition text."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = dict(LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, value))
    return out


def _matches(sample: str, name: str) -> bool:
    return sample == name or sample == name + "_total"


def counters(text: str, kind: str) -> dict:
    """Our counter names → values (accepted_per_pos: a list by position) from one scrape."""
    names = NAMES[kind]
    samples = parse(text)
    out: dict = {}
    for ours, theirs in names.items():
        if ours == "accepted_per_pos":
            by_pos: dict[int, float] = {}
            for name, labels, v in samples:
                pos = next((labels[k] for k in POSITION_LABELS if k in labels), None)
                if _matches(name, theirs) and pos is not None and pos.isdigit():
                    by_pos[int(pos)] = by_pos.get(int(pos), 0.0) + v
            if by_pos:
                out[ours] = [by_pos.get(i, 0.0) for i in range(max(by_pos) + 1)]
            continue
        vals = [v for name, _, v in samples if _matches(name, theirs)]
        if vals:
            out[ours] = sum(vals)
    return out


GAUGES = ("accept_length", "accept_rate")


def difference(after: dict, before: dict) -> dict:
    out = {}
    for key, v in after.items():
        if key in GAUGES:
            out[key] = v
            continue
        b = before.get(key)
        if isinstance(v, list):
            b = b or []
            out[key] = [int(round(x - (b[i] if i < len(b) else 0))) for i, x in enumerate(v)]
        else:
            out[key] = int(round(v - (b or 0)))
    return out


EMPTY = {
    "tau": None,
    "tau_round": None,
    "tau_nonempty": None,
    "acceptance_rate": None,
    "alpha_marginal": None,
    "accept_length_window": None,
    "target_forwards": None,
}


def speculation(delta: dict, new_tokens: int, requests: int | None = None) -> dict:
    """Speculation figures from a pass's counter difference, each under our name for its
    definition (docs/metrics.md): `tau` (new tokens per target forward, prefill counted),
    `tau_round` (per decoding step after the prefill: needs the pass's `requests`),
    `tau_nonempty` (vLLM's mean acceptance length, 1 + accepted ÷ drafts: rounds without a
    draft left out), `alpha_marginal` (accepted at position i ÷ drafts: vLLM's per-position
    rate, marginal, not our conditional alpha_per_pos) and `accept_length_window` (SGLang's
    gauge over its own recent window, not this pass's)."""
    acc, drafted, drafts = (delta.get(k) for k in ("accepted_tokens", "draft_tokens", "drafts"))
    if acc is None and "accept_length" in delta:
        return {
            **EMPTY,
            "accept_length_window": delta["accept_length"],
            "acceptance_rate": delta.get("accept_rate"),
            "source": "gauge",
        }
    if acc is None or drafted is None:
        return dict(EMPTY)
    n = delta.get("generated_tokens", new_tokens)
    per_pos = delta.get("accepted_per_pos") or []
    forwards = n - acc
    rounds = forwards - requests if requests is not None else None
    return {
        **EMPTY,
        "tau": n / forwards if forwards > 0 else None,
        "tau_round": (n - requests) / rounds if rounds and rounds > 0 else None,
        "tau_nonempty": 1 + acc / drafts if drafts else None,
        "acceptance_rate": acc / drafted if drafted else None,
        "alpha_marginal": [round(a / drafts, 4) for a in per_pos] if drafts else None,
        "target_forwards": forwards,
        "source": "counters",
    }
