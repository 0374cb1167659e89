"""`python -m train`: the Hydra entry point end to end on a tiny target, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT


def train(args, tmp_path, module="train"):
    env = dict(os.environ, SPECSWEEP_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture()
def prompt_file(tmp_path):
    f = tmp_path / "prompts.jsonl"
    words = "write a short poem about the sea and explain the answer step by step".split()
    f.write_text(
        "".join(
            json.dumps(
                {
                    "question_id": f"t{i}",
                    "category": "general",
                    "turns": [" ".join(words[i % 5 : i % 5 + 6])],
                }
            )
            + "\n"
            for i in range(8)
        )
    )
    return f


@pytest.mark.parametrize("drafter", ["eagle3", "medusa"])
def test_train_command_writes_the_published_layout(drafter, tiny_target_dir, prompt_file, tmp_path):
    out = tmp_path / "out"
    args = [
        f"drafter={drafter}",
        f"target={tiny_target_dir}",
        f"prompts={prompt_file}",
        "max_new_tokens=12",
        "layers=[0,1,-1]",
        "distill.batch=4",
        "drafter.steps=4",
        "drafter.eval_every=2",
        "drafter.ckpt_every=2",
    ] + (
        ["drafter.layers=[0,1,1]", "drafter.vocab_size=40"]
        if drafter == "eagle3"
        else ["drafter.num_heads=2"]
    )
    r = train([*args, f"out={out}"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["drafter"] == drafter and summary["artifact_bytes"] > 0
    # the training precision and the target whose states the heads read, named and explained
    from engines.cpu import cpu_flags

    native = bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})
    assert summary["precision"] == ("bfloat16" if native else "float32")
    assert summary["precision_reason"].startswith("auto: ")
    assert summary["states"]["target"] == "bfloat16"
    assert {e["weights"] for e in summary["states"]["engines"]} == {"bfloat16"}
    assert summary["states"]["computed_here"]["shards"] >= 1  # on the fly: no cache before
    assert f"training precision: {summary['precision']}" in r.stderr
    assert len(summary["top1_per_pos"]) >= 2
    files = {p.name for p in out.iterdir()}
    assert "config.json" in files
    assert ("model.safetensors" if drafter == "eagle3" else "medusa_lm_head.safetensors") in files
    # the checkpoint of that run is not resumed by a run of other settings: one line, before
    # any data is built, and the artifact and checkpoint stay as they are
    r = train([*args, "drafter.lr=0.5", f"out={tmp_path / 'other'}"], tmp_path)
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert "drafter.lr" in lines[0] and "0.5" in lines[0] and "resume=false" in lines[0]
    assert not (tmp_path / "other").exists()
    if drafter == "eagle3":  # the saved head on the same held-out split, from the same data
        r = train([*args, f"+heads=[{out}]"], tmp_path, "train.evaluate")
        assert r.returncode == 0, r.stderr[-2000:]
        line = next(x for x in r.stdout.splitlines() if x.startswith(str(out)))
        tops = json.loads(line.split("by draft position ", 1)[1])
        assert set(tops) == {"all", "greedy", "sampled"} and len(tops["all"]) == 4
        assert tops["all"][0] == pytest.approx(summary["top1_per_pos"][0], abs=0.1)
        line = next(x for x in r.stdout.splitlines() if "first draft position by source" in x)
        firsts = json.loads(line.split("by source ", 1)[1])
        assert list(firsts) == ["prompts"] and firsts["prompts"] == pytest.approx(tops["all"][0])
        r = train(args, tmp_path, "train.evaluate")
        assert r.returncode == 2 and "names no head to evaluate" in r.stderr


def test_unknown_drafter_is_one_clear_line(tiny_target_dir, tmp_path):
    r = train(["drafter=eagle9", f"target={tiny_target_dir}"], tmp_path)
    assert r.returncode == 2
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "eagle9" in lines[0] and "eagle3" in lines[0]


@pytest.mark.parametrize(
    "arg, words",
    [
        ("precision=fp8", ["precision='fp8'", "auto, float32, bfloat16"]),
        ("states_target=int2", ["states_target='int2'", "bfloat16, auto, float32"]),
        (
            "states_engine={weights: auto}",
            ["states_engine.weights='auto'", "states_target='bfloat16'"],
        ),
    ],
)
def test_a_bad_precision_or_states_target_is_one_clear_line(arg, words, tiny_target_dir, tmp_path):
    r = train(["drafter=eagle3", f"target={tiny_target_dir}", arg], tmp_path)
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert all(w in lines[0] for w in words), lines[0]
