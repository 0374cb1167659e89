"""Greedy verdicts: the dtype-aware near-tie tolerance, no near-ties on a batch-invariant
engine, and turns after a divergence re-decoded on the baseline's history."""

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


def dialog_run(target_dir, out, repeats: int, *extra: str) -> list[str]:
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
        *extra,
    ]


def plant(monkeypatch, later_round: int | None):
    """NGram with a wrong first token on the conversation's first turn and, with `later_round`,
    a wrong token at that round of every later turn (its prompt is longer than the first's):
    the re-decode of a later turn on the baseline's history meets the later bug too."""
    real = NGram.accept
    first = {}

    def accept(self, state, proposal, logits):
        acc = real(self, state, proposal, logits)
        n0 = first.setdefault("n_prompt", state.n_prompt)  # the first turn's prompt
        state.aux["rounds"] = state.aux.get("rounds", 0) + 1
        if state.n_prompt == n0 and state.aux["rounds"] == 1:
            return one_wrong_token(acc)
        if later_round and state.n_prompt > n0 and state.aux["rounds"] == later_round:
            return one_wrong_token(acc)
        return acc

    monkeypatch.setattr(NGram, "accept", accept)


@pytest.mark.usefixtures("one_thread")
def test_a_later_turn_is_re_decoded_on_the_baselines_history(
    tiny_target_dir, tmp_path, monkeypatch
):
    """Turn 1 diverges, so turn 2's measured prompt differs from ar's: it is decoded again,
    untimed, on ar's history. Without a later bug that re-decode is exact (after-divergence)."""
    plant(monkeypatch, later_round=None)
    summary, path, _ = execute(compose(dialog_run(tiny_target_dir, tmp_path, 1)), tmp_path)
    recs = [json.loads(x) for x in open(path) if json.loads(x)["role"] == "method"]
    assert [(r["verdict"], r["redecode_verdict"]) for r in recs] == [
        ("mismatch", None),
        ("after-divergence", "exact"),
    ]
    assert summary.mismatches.iloc[0] == 1 and summary.exact_match.iloc[0] == 0


@pytest.mark.usefixtures("one_thread")
def test_a_wrong_token_in_a_later_turn_is_caught_after_a_divergence(
    tiny_target_dir, tmp_path, monkeypatch
):
    """The same divergence in turn 1 and a second bug at turn 2's second round: before, turn 2
    went uncompared (after-divergence) and the second bug was hidden behind the first."""
    plant(monkeypatch, later_round=2)
    summary, path, _ = execute(compose(dialog_run(tiny_target_dir, tmp_path, 1)), tmp_path)
    recs = [json.loads(x) for x in open(path) if json.loads(x)["role"] == "method"]
    assert [(r["verdict"], r["redecode_verdict"]) for r in recs] == [
        ("mismatch", None),
        ("mismatch", "mismatch"),
    ]
    assert recs[1]["first_divergence"] >= 1  # at its second round, not its first token
    assert summary.mismatches.iloc[0] == 2


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(
    "engine,weights,invariant,verdict",
    [
        ("lean", "int8", True, "mismatch"),
        ("lean", "float32", False, "near-tie"),
        ("hf", "auto", False, "near-tie"),
    ],
)
def test_a_small_gap_is_a_near_tie_only_where_rows_are_not_batch_invariant(
    engine, weights, invariant, verdict, tiny_target_dir, tmp_path, monkeypatch
):
    """One wrong token, within a tie_tolerance wide enough to cover it: on the lean engine's
    native kernels (int8 weights: the same bits alone or among 64 rows) that is still a
    mismatch; on torch's kernels (float32 weights) and on transformers it stays a near-tie."""
    plant(monkeypatch, later_round=None)
    args = dialog_run(tiny_target_dir, tmp_path, 1, f"engine={engine}", f"model.weights={weights}")
    summary, path, _ = execute(compose([*args, "tie_tolerance=1000"]), tmp_path)
    choice = json.loads((tmp_path / "env.json").read_text())["engine_choice"]
    assert choice["engine"] == engine and choice["batch_invariant"] is invariant, choice
    recs = [json.loads(x) for x in open(path) if json.loads(x)["role"] == "method"]
    assert recs[0]["verdict"] == verdict and abs(recs[0]["method_gap"]) < 1000


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
