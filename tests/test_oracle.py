"""The oracle drafter: every draft accepted at T = 0 (τ at the maximum a chain of k allows),
outputs exact, on both engines; at T = 1 still lossless (tests/test_distcheck.py style)."""

from __future__ import annotations

import pytest
import torch
from helpers import make_ctx, method, prompts

from bench.decode.loop import generate
from groundfloor.clock import Clock
from groundfloor.sampling import SamplingParams

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("k", [1, 3, 8])
def test_oracle_accepts_every_draft_and_is_exact(target, k):
    ctx = make_ctx(target, k)
    ar = method("ar", ctx)
    oracle = method("oracle", ctx)
    for p in prompts(4, seed=k):
        n = 40
        base = generate(ar, p, n, SamplingParams(), set(), Clock(torch.device("cpu")))
        res = generate(oracle, p, n, SamplingParams(), set(), Clock(torch.device("cpu")))
        assert res.output_ids == base.output_ids
        assert res.accepted_tokens == res.drafted_tokens > 0
        # every round but the last takes k drafts + the bonus: τ is the most a chain allows
        assert all(a == k for a in res.round_accepted[:-1])
        assert res.target_forwards == 1 + -(-(n - 1) // (k + 1))


def test_oracle_stops_at_eos(target):
    ctx = make_ctx(target, 4)
    full = generate(
        method("ar", ctx), prompts(1)[0], 30, SamplingParams(), set(), Clock(torch.device("cpu"))
    )
    eos = {full.output_ids[12]}
    ctx.eos = frozenset(eos)
    base = generate(
        method("ar", ctx), prompts(1)[0], 30, SamplingParams(), eos, Clock(torch.device("cpu"))
    )
    res = generate(
        method("oracle", ctx), prompts(1)[0], 30, SamplingParams(), eos, Clock(torch.device("cpu"))
    )
    assert res.output_ids == base.output_ids and res.stop == "eos"


def test_oracle_is_marked_a_bound_in_the_console_and_the_report(tiny_target_dir, tmp_path):
    """The oracle is a ceiling, not a method: only it is a bound; the console summary names it
    `oracle (bound)` with a note, and the report's tables label it so (the leaderboard's CSV
    with a `bound` column), while ar beside it is unmarked."""
    import pandas as pd
    from conftest import compose
    from rich.console import Console

    from bench.outputs.table import BOUND, print_summary
    from bench.report.index import build
    from bench.run.runner import execute
    from methods.registry import is_bound, method_names

    assert [m for m in method_names() if is_bound(m)] == ["oracle"]
    assert not is_bound("vllm-ngram")  # a name outside conf/method/: not a bound
    args = [
        "model=hf", f"model.target={tiny_target_dir}", "model.dtype=float32", "device=cpu",
        "task=code", "limit=1", "max_new_tokens=8", "repeats=1", "warmup=0", "remeasure=0",
    ]  # fmt: skip
    runs = []
    for m in ("oracle", "ngram"):
        summary, _, _ = execute(compose(args + [f"method={m}", "k=4", f"out={tmp_path / m}"]),
                                tmp_path / m)  # fmt: skip
        runs.append(summary)
    console = Console(record=True, width=400)
    print_summary(pd.concat(runs), "cells", console)
    text = console.export_text()
    assert f"oracle{BOUND}" in text and f"ngram{BOUND}" not in text
    assert "not a method to rank" in text
    index = build([tmp_path / "oracle", tmp_path / "ngram"], tmp_path / "report").read_text()
    assert f"oracle k=4{BOUND}" in index and f"ngram k=4{BOUND}" not in index
    board = pd.concat(pd.read_csv(p) for p in (tmp_path / "report").glob("leaderboard__*.csv"))
    assert set(board[board.bound].method) == {"oracle"} and "ngram" in set(board.method)
