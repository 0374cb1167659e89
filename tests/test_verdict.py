"""Greedy verdicts: the dtype-aware near-tie tolerance and turns after a divergence."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import torch
from conftest import compose

from bench.outputs.verdict import rounding_step
from bench.run.runner import execute
from methods.base import Accepted
from methods.ngram import NGram


def test_rounding_step_follows_the_dtype():
    assert rounding_step(torch.tensor([20.0, -3.0], dtype=torch.bfloat16)) == 0.125
    assert rounding_step(torch.tensor([40.0], dtype=torch.bfloat16)) == 0.25
    assert rounding_step(torch.tensor([20.0])) < 1e-5


def one_wrong_token(acc: Accepted) -> Accepted:
    """A broken method's round: its first emitted token changed."""
    return dataclasses.replace(acc, tokens=[(acc.tokens[0] + 1) % 128] + acc.tokens[1:])


def dialog_run(target_dir, out, repeats: int) -> list[str]:
    return [
        "method=ngram",
        "k=4",  # fixed: k=auto would add an untimed turn measuring the lookup (warmup=0)
        "model=hf",
        f"model.target={target_dir}",
        "model.dtype=float32",
        "device=cpu",
        "task=dialog",
        "limit=1",
        "max_new_tokens=6",
        f"repeats={repeats}",
        "warmup=0",
        "remeasure=0",
        f"out={out}",
    ]


@pytest.mark.usefixtures("one_thread")
def test_turns_after_a_divergence_are_labelled(tiny_target_dir, tmp_path, monkeypatch):
    real = NGram.accept

    def wrong_first_token(self, state, proposal, logits):  # a broken method: one wrong token
        acc = real(self, state, proposal, logits)
        return one_wrong_token(acc) if state.length == state.n_prompt + 1 else acc

    monkeypatch.setattr(NGram, "accept", wrong_first_token)
    args = dialog_run(tiny_target_dir, tmp_path, repeats=1)
    summary, path, _ = execute(compose(args), tmp_path)
    recs = [json.loads(x) for x in open(path)]
    verdicts = [r["verdict"] for r in recs if r["role"] == "method"]
    assert verdicts == ["mismatch", "after-divergence"]
    assert summary.mismatches.iloc[0] == 1 and summary.exact_match.iloc[0] == 0


def test_a_divergence_on_a_later_repeat_is_caught(tiny_target_dir, tmp_path, monkeypatch):
    """A method that goes wrong only on its second repeat: the verdict covers every repeat, and
    speedup_exact leaves the diverged units out."""
    real_start, real_accept = NGram.start, NGram.accept
    seen = {"turns": 0}

    def start(self, state):
        seen["turns"] += 1
        return real_start(self, state)

    def accept(self, state, proposal, logits):
        acc = real_accept(self, state, proposal, logits)
        if seen["turns"] == 3 and state.length == state.n_prompt + 1:  # repeat 1, turn 1
            return one_wrong_token(acc)
        return acc

    monkeypatch.setattr(NGram, "start", start)
    monkeypatch.setattr(NGram, "accept", accept)
    args = dialog_run(tiny_target_dir, tmp_path, repeats=2)
    summary, path, _ = execute(compose(args), tmp_path)
    recs = [json.loads(x) for x in open(path)]
    got = {(r["repeat"], r["turn"]): r["verdict"] for r in recs if r["role"] == "method"}
    assert got == {
        (0, 0): "exact",
        (0, 1): "exact",
        (1, 0): "mismatch",
        (1, 1): "after-divergence",
    }
    row = summary.iloc[0]
    assert row.exact_match == 0 and row.mismatches == 1
    assert row.exact_units == 0 and pd.isna(row.speedup_exact)
