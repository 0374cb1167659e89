"""bench.tools.profile_step on the tiny model: a decoding step and a verify forward, profiled."""

from __future__ import annotations

import pytest

from bench.tools import profile_step

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("rows", [1, 3])
def test_profiles_a_forward_over_rows_new_tokens(tiny_target_dir, rows, capsys):
    r = profile_step.main(
        ["--model", str(tiny_target_dir), "--context", "8", "--steps", "3", "--rows", str(rows)]
    )
    assert r["new_tokens"] == rows and r["context"] == 8
    assert r["step_ms"] > 0 and r["profiled_step_ms"] > 0
    assert sum(row["share"] for row in r["rows"]) >= 1 - 1e-6  # the rest is Python and dispatch
    groups = {row["group"] for row in r["rows"]}
    assert any("one-call forward" in g for g in groups)  # our kernels ran, the forward one call
    out = capsys.readouterr().out
    assert ("one decoding step" if rows == 1 else f"one forward over {rows} new tokens") in out


def test_rejects_rows_below_one(tiny_target_dir, capsys):
    with pytest.raises(SystemExit) as e:
        profile_step.main(["--model", str(tiny_target_dir), "--rows", "0"])
    assert e.value.code != 0
    assert "--rows 0" in capsys.readouterr().err
