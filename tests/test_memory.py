"""Memory overhead on a real run whose answer is known: a draft model's weights from its shape,
its KV cache from its shape, and nothing counted twice."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import compose
from transformers import AutoConfig, AutoModelForCausalLM

from bench.run.runner import execute

pytestmark = pytest.mark.usefixtures("one_thread")


def test_memory_overhead_is_static_drafter_memory_plus_the_peak_delta(
    tiny_target_dir, tiny_draft_dir, tmp_path
):
    args = [
        "method=draft",
        "k=3",
        "model=hf",
        f"model.target={tiny_target_dir}",
        f"model.draft={tiny_draft_dir}",
        "model.dtype=float32",
        "device=cpu",
        "task=code",
        "limit=2",
        "max_new_tokens=24",
        "repeats=2",
        "warmup=0",
        "remeasure=0",
        f"out={tmp_path}",
    ]
    summary, path, _ = execute(compose(args), tmp_path)
    recs = pd.DataFrame([json.loads(x) for x in open(path)])
    method = recs[recs.role == "method"]
    # static: the draft's own parameters (an untied float32 model), from its shape
    draft = AutoModelForCausalLM.from_pretrained(tiny_draft_dir)
    weights = sum(p.numel() * 4 for p in draft.parameters())
    assert method.static_mb.to_numpy() == pytest.approx(weights / 1e6)
    # per turn: its KV cache, 2 (K, V) × layers × KV heads × head dim × float32 per position
    c = AutoConfig.from_pretrained(tiny_draft_dir)
    per_pos = 2 * c.num_hidden_layers * c.num_key_value_heads * (c.hidden_size // 4) * 4
    positions = method.prompt_tokens + method.new_tokens
    assert (method.state_mb * 1e6 / per_pos).between(positions - 2, positions + 3).all()
    assert (method.state_mb > 0).all()
    # the overhead: static memory + the method's peak delta over the baseline's, the cache
    # (already inside the peak delta) not added again
    peaks = recs.groupby("role").peak_mem_delta_mb.median()
    want = weights / 1e6 + max(0.0, peaks["method"] - peaks["baseline"])
    assert summary.memory_overhead_mb.iloc[0] == pytest.approx(want, abs=1e-3)
