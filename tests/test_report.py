"""The comparison report on synthetic run directories (a k × temperature sweep on the CPU plus
a GPU run) and on imported Spec-Bench answer files: every chart and section is written, groups
are never pooled, and the numbers in the tables are the runs' numbers."""

from __future__ import annotations

import json

import matplotlib.image as mpimg
import pandas as pd
import pytest
from synthetic_runs import make_run, make_sweep

from bench import report
from bench.report import charts
from bench.report.runs import k_agnostic_methods, load_runs
from bench.report.specbench_import import import_cells
from groundfloor.errors import UserError

CHARTS = [
    "speedup_by_task",
    "tau_by_task",
    "k_sweep",
    "temperature_sweep",
    "alpha_per_position",
    "time_breakdown",
    "memory",
]
SECTIONS = [
    "### Leaderboard",
    "### Speedup by task",
    "### τ by task",
    "### k sweep",
    "### Temperature sweep",
    "### Acceptance rate per draft position",
    "### Time breakdown",
    "### Memory overhead",
    "## Device comparison",
    "## Losslessness",
    "## Runs",
]
CPU = "smollm2-135m-cpu-test-cpu-2-cores-float32"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = make_sweep(tmp_path_factory.mktemp("runs"))
    out = tmp_path_factory.mktemp("report")
    (out / "stale.png").write_text("old")  # outputs are rewritten fresh
    index = report.build([root], out)
    return root, out, index.read_text()


def test_every_chart_and_section_is_written(built):
    _, out, md = built
    for name in CHARTS:
        png = out / f"{name}__{CPU}.png"
        img = mpimg.imread(png)
        assert img.shape[0] > 300 and img.shape[1] > 500, name  # a real, legible-size image
        assert f"]({png.name})" in md, name
        assert (out / f"{name}__{CPU}.csv").exists(), name
    assert (out / "device_comparison__smollm2-135m-float32.png").exists()
    for s in SECTIONS:
        assert s in md, s
    assert not (out / "stale.png").exists()


def test_groups_are_never_pooled(built):
    _, out, md = built
    cpu = pd.read_csv(out / f"speedup_by_task__{CPU}.csv")
    gpu = pd.read_csv(out / "speedup_by_task__smollm2-135m-cuda-nvidia-h100-80gb-hbm3-float32.csv")
    assert set(gpu.label) == {"ar", "ngram k=4"}
    assert len(cpu) == 5 * 3  # 5 method configs × (2 tasks + overall), T = 0 only
    assert "## smollm2-135m · cpu (Test CPU, 2 cores) · float32" in md
    assert "## smollm2-135m · cuda (NVIDIA H100 80GB HBM3) · float32" in md
    assert "device **cuda (NVIDIA H100 80GB HBM3)** · dtype **float32**" in md
    dev = pd.read_csv(out / "device_comparison__smollm2-135m-float32.csv")
    assert set(dev.device_name) == {"cpu (Test CPU, 2 cores)", "cuda (NVIDIA H100 80GB HBM3)"}


def test_tables_hold_the_runs_numbers(built):
    root, out, md = built
    board = pd.read_csv(out / f"leaderboard__{CPU}.csv")
    s = pd.read_csv(root / "sweep" / "3_ngram" / "summary.csv")  # ngram k=2, T=1
    want = s[s.task == "all"].iloc[0]
    got = board[(board.label == "ngram k=2") & (board.temperature == 1) & (board.task == "overall")]
    assert got.speedup.iloc[0] == pytest.approx(want.speedup)
    # τ under the name its peers use: tau_round (per decoding step, prefill not counted)
    assert "tau" not in board and got.tau_round.iloc[0] == pytest.approx(want.tau_round)
    lo, v, hi = got[["tau_round_ci_low", "tau_round", "tau_round_ci_high"]].iloc[0]
    assert lo - 1e-9 <= v <= hi + 1e-9
    assert board[board.label == "ar"].tau_round.eq(1.0).all()
    ks = pd.read_csv(out / f"k_sweep__{CPU}.csv")
    assert sorted(ks[ks.method == "ngram"].k) == [2, 4] and "ar" not in set(ks.method)
    ts = pd.read_csv(out / f"temperature_sweep__{CPU}.csv")
    assert sorted(ts[ts.label == "ngram k=4"].temperature) == [0, 1]
    tb = pd.read_csv(out / f"time_breakdown__{CPU}.csv")
    shares = tb[["prefill", "draft", "verify", "other"]].sum(axis=1)
    assert shares.to_numpy() == pytest.approx(1.0)
    assert tb.label.iloc[0] == "ar"
    mem = pd.read_csv(out / f"memory__{CPU}.csv").set_index("label")
    assert mem.loc["draft k=4", "memory_overhead_mb"] == pytest.approx(120.0)
    alpha = pd.read_csv(out / f"alpha_per_position__{CPU}.csv")
    assert alpha[alpha.label == "ngram k=4"].position.tolist() == [1, 2, 3, 4]


def test_losslessness_lists_each_mismatch(built):
    _, out, md = built
    div = pd.read_csv(out / "divergences.csv")
    # every repeat's divergences (2 tasks × 2 repeats), not only repeat 0's
    assert len(div) == 4 and set(div.label) == {"draft k=4"} and set(div.repeat) == {0, 1}
    assert set(div.first_divergence) == {7} and set(div.logit_gap) == {0.8}
    assert "0.67 (1 mismatch)" in md and "not checked" in md
    assert "4 divergent turn(s)" in md


def test_sweep_over_k_does_not_split_ar(tmp_path):
    """ar ignores k: a sweep k=2,4 runs it twice, and the report shows one ar."""
    for i, k in enumerate((2, 4)):
        make_run(tmp_path / f"{i}_ar", "ar", k, tau=1.0, speedup=1.0, seed=i)
    cells, _, runs = load_runs([tmp_path])
    assert len(runs) == 2 and set(cells.k) == {0} and len(cells[cells.task == "all"]) == 1
    assert "ar" in k_agnostic_methods() and "ngram" not in k_agnostic_methods()


def test_mixed_settings_are_flagged(tmp_path):
    make_run(tmp_path / "a", "ngram", 4, prompts=2)
    make_run(tmp_path / "b", "ar", 0, prompts=3)
    md = report.build([tmp_path], tmp_path / "out").read_text()
    assert "**Mixed settings**" in md


def test_colours_are_fixed_per_method():
    p = charts.Palette(["zeta", "ngram", "alpha"])
    assert p.method("ngram") == charts.FIXED["ngram"]
    assert p.method("alpha") != p.method("zeta")
    assert charts.Palette(["alpha"]).method("alpha") == p.method("alpha")
    p.ks = {"ngram": [2, 4, 8]}
    assert p.config("ngram", 8) == pytest.approx(charts.matplotlib.colors.to_rgb("#1f77b4"))
    assert p.config("ngram", 2) != p.config("ngram", 4)


def test_no_runs_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="no runs found"):
        report.build([tmp_path], tmp_path / "out")


# --- Spec-Bench answer files ---
def answers(path, model, rate, accept, n=12):
    cats = ["writing", "translation", "qa", "math_reasoning"]
    with open(path, "w") as f:
        for q in range(n):
            turns = 2 if cats[q % 4] == "writing" else 1
            new = [100 + 10 * q] * turns
            acc = [[accept] * (t // accept) for t in new]
            f.write(
                json.dumps(
                    {
                        "question_id": q + 81,
                        "category": cats[q % 4],
                        "answer_id": f"a{q}",
                        "model_id": model,
                        "tstamp": 0.0,
                        "choices": [
                            {
                                "index": 0,
                                "turns": ["x"] * turns,
                                "new_tokens": new,
                                "wall_time": [t / rate for t in new],
                                "decoding_steps": [len(a) for a in acc],
                                "accept_lengths": acc,
                            }
                        ],
                    }
                )
                + "\n"
            )
    return path


def test_specbench_import_speedup_and_tau(tmp_path):
    base = answers(tmp_path / "vanilla.jsonl", "vicuna-7b-v1.3-vanilla", 20.0, 1)
    eagle = answers(tmp_path / "eagle.jsonl", "vicuna-7b-v1.3-eagle", 60.0, 4, n=8)
    cells = import_cells(base, [("eagle", eagle)])
    row = cells[(cells.method == "eagle") & (cells.task == "all")].iloc[0]
    assert row.speedup == pytest.approx(3.0) and row.n_prompts == 8  # common questions only
    assert row.tau_round == pytest.approx(4.0) and pd.isna(row.tau)  # Spec-Bench's per step
    assert set(cells.task) == {"dialog", "translation", "qa", "reasoning", "all"}
    assert (
        cells.group.iloc[0] == "vicuna-7b-v1.3-vanilla · unknown device · unknown dtype · "
        "spec-bench import"
    )


def test_specbench_beside_our_runs_in_its_own_group(tmp_path):
    make_run(tmp_path / "runs" / "r", "ngram", 4)
    base = answers(tmp_path / "b.jsonl", "vicuna", 20.0, 1)
    eagle = answers(tmp_path / "e.jsonl", "vicuna-eagle", 50.0, 3)
    out = tmp_path / "out"
    rc = report.main(
        [
            str(tmp_path / "runs"),
            "--out",
            str(out),
            "--specbench-baseline",
            str(base),
            "--specbench",
            f"eagle={eagle}",
            "--specbench-device",
            "A100",
        ]
    )
    assert rc == 0
    md = (out / "index.md").read_text()
    assert "## vicuna · A100 · unknown dtype · spec-bench import" in md
    board = pd.read_csv(out / "leaderboard__vicuna-a100-unknown-dtype-spec-bench-import.csv")
    assert set(board.label) == {"baseline", "eagle"}
    assert (out / "speedup_by_task__vicuna-a100-unknown-dtype-spec-bench-import.png").exists()


def test_bad_answer_file_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_id": 1, "choices": [{"new_tokens": [3]}]}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:1: not a Spec-Bench answer line"):
        import_cells(bad, [])


def test_a_category_rows_tau_interval_is_bootstrapped_within_the_category():
    """τ's interval is a registered metric of summary.csv: a category's row bootstraps over that
    category's units only, the task's row over all of them."""
    from synthetic_runs import _rec

    from bench.outputs.metrics import summarize

    rows = []
    for i, (cat, fwd) in enumerate([("a", 40)] * 4 + [("b", 10)] * 4):
        for role, f in (("baseline", 40), ("method", fwd)):
            r = _rec(
                "qa", f"p{i}", 0, 0, role, "ngram", 2, 0.0, "cpu", 40, f, 1.0, 9, 3, [], [], "exact"
            )
            rows.append({**r, "category": cat})
    s = summarize(pd.DataFrame(rows)).set_index("category")
    assert (s.loc["a", "tau_ci_low"], s.loc["a", "tau_ci_high"]) == (1.0, 1.0)
    assert (s.loc["b", "tau_ci_low"], s.loc["b", "tau_ci_high"]) == (4.0, 4.0)
    assert s.loc["all", "tau_ci_low"] < s.loc["all", "tau"] < s.loc["all", "tau_ci_high"]


def test_an_untested_distribution_check_is_not_read_as_a_pass():
    """A check=distribution whose method drafted under the floor has no p-value: the
    losslessness matrix says untested, apart from a cell that ran no check at all."""
    from bench.report.tables import lossless_markdown

    df = pd.DataFrame(
        {
            "label": ["ar", "ngram k=8", "eagle"],
            "temperature": [1.0, 1.0, 1.0],
            "task": ["code"] * 3,
            "exact_match": [None] * 3,
            "near_ties": [None] * 3,
            "mismatches": [None] * 3,
            "dist_pvalue": [None, 0.42, None],
            "dist_status": ["untested", "tested", None],
        }
    )
    rows = lossless_markdown(df).splitlines()[2:]
    assert [r.split("|")[3].strip() for r in rows] == ["untested", "p = 0.42", "not checked"]


def test_each_method_on_both_targets_side_by_side(tmp_path):
    """The 4-bit file and its 16-bit copy: a column group per target, each target's plain
    decoding, a self-draft apart from the shipped draft, words that say the 16-bit target's best
    is below the 4-bit target's plain decoding, and the absolute tokens/s chart in the report."""
    from bench.report import targets

    q4 = {"weights": "int4", "target_format": "Q4_1", "engine": "lean"}
    b16 = {"weights": "bfloat16", "target_format": "bf16 (from Q4_1)", "engine": "lean"}
    make_run(tmp_path / "a", "ngram", 4, speedup=1.3, fields={**q4, "draft_format": "none"})
    make_run(tmp_path / "b", "ngram", 4, speedup=1.6, base_rate=8.0,
             fields={**b16, "draft_format": "none"})  # fmt: skip
    make_run(tmp_path / "c", "draft", 4, speedup=1.4, base_rate=8.0,
             fields={**b16, "draft_format": "self:int4"})  # fmt: skip
    make_run(tmp_path / "d", "draft", 4, speedup=1.1, base_rate=8.0, seed=3,
             fields={**b16, "draft_format": "int8"})  # fmt: skip
    cells, _, _ = load_runs([tmp_path])
    table, words = targets.side_by_side(cells)
    assert list(table.method) == ["ngram", "draft self:int4", "draft", targets.PLAIN]
    assert table.loc[0, "Q4_1 speedup"].startswith("1.3")
    assert table.loc[0, "bf16 (from Q4_1) speedup"].startswith("1.6")
    assert table.loc[1, "Q4_1 speedup"] == "–"
    plain = table.iloc[-1]
    assert 19 < float(plain["Q4_1 tok/s"]) < 21
    assert 7.5 < float(plain["bf16 (from Q4_1) tok/s"]) < 8.5
    assert "fastest plain decoding is the Q4_1 target's" in words
    assert "ngram at 1.6" in words and ": below it" in words
    out = tmp_path / "report"
    md = report.build([tmp_path / x for x in "abcd"], out).read_text()
    assert "## Each method on each target" in md and words in md
    assert list(out.glob("targets__*.png")) and list(out.glob("targets__*.csv"))
    assert targets.main([str(tmp_path / x) for x in "abcd"]) == 0
