"""The category prompt sources (train.categories): wiki markup and .po parsing, the builders,
and the prompt sets a training config names (train.sources.prompt_sets)."""

from __future__ import annotations

import importlib.util

import pytest
from omegaconf import OmegaConf

from groundfloor.errors import UserError
from train import categories as cat
from train.sources import build, prompt_sets

WIKI = "\n".join(
    [
        "{{Infobox thing|name={{nested|x}}|size=3}}",
        "'''Zorblat''' is a [[fictional country|made-up land]] in the [[North Sea]]"
        '<ref name="a">{{cite web|url=x}}</ref>, known for its cheese, its wind and its long '
        "history of peaceful trade with all of its many neighbours over the many long centuries "
        "of its quiet existence on the edge of the cold northern sea.<ref>Some book, p. 3</ref>",
        "[[File:Map.png|thumb|A map with [[link]]s]]",
        "* a list item that is not prose at all and is left out of every passage we build here",
        "<!-- a hidden comment that is long enough to count as a paragraph if it were kept -->",
        "",
        "== History ==",
        '{| class="wikitable"',
        "| cell || cell",
        "|}",
        "Zorblat was founded in 1204 by traders who sailed from the south and settled on its "
        "rocky shore, building ''small'' wooden houses, markets and a harbour that grew into the "
        "busy and crowded town it is today, with ferries, shops and a famous cheese market "
        "every week.",
        "Too short a line.",
        "",
        "== References ==",
        "The references section has a long line of text that should never be used as a passage "
        "anywhere at all, however long it grows and however many words it has, forty or more.",
        "[[Category:Places]]",
    ]
)


def test_wiki_markup_is_cleaned_to_prose_by_section():
    secs = cat.sections(cat.clean_wikitext(WIKI))
    assert [name for name, _ in secs] == ["", "History"]
    lead, history = secs[0][1], secs[1][1]
    assert len(lead) == 1 and len(history) == 1
    assert lead[0].startswith("Zorblat is a made-up land in the North Sea, known for its cheese")
    assert history[0].startswith("Zorblat was founded in 1204") and "small wooden" in history[0]
    text = " ".join(lead + history)
    for junk in ("{{", "}}", "[[", "]]", "<ref", "'''", "cite web", "thumb", "Category", "|"):
        assert junk not in text


PO = r"""msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"

#: forms.py:10
msgid "Enter a valid value."
msgstr "Geben Sie einen gültigen Wert ein."

msgid "This field is required."
msgstr ""
"Dieses Feld "
"ist zwingend \"erforderlich\"."

msgid "%(count)d item"
msgid_plural "%(count)d items"
msgstr[0] "%(count)d Element gewählt"
msgstr[1] "%(count)d Elemente gewählt"

msgid "Untranslated string"
msgstr ""

msgid "Yes"
msgstr "Ja"
"""


def test_po_strings_reads_translations_in_order():
    assert cat.po_strings(PO) == [
        "Geben Sie einen gültigen Wert ein.",
        'Dieses Feld ist zwingend "erforderlich".',
        "%(count)d Element gewählt",
    ]  # the header, the empty msgstr and one-word strings are left out


def test_prompt_sets_are_the_main_one_and_more_data():
    cfg = OmegaConf.create(
        {
            "prompts": ["templated"],
            "limit": 5,
            "seed": 0,
            "distill": {"weights": "float32", "batch": 4},
            "more_data": [{"prompts": ["wiki_qa"], "distill": {"weights": "auto"}}],
        }
    )
    sets = prompt_sets(cfg)
    assert [list(s.prompts) for s in sets] == [["templated"], ["wiki_qa"]]
    assert [s.limit for s in sets] == [5, None] and sets[1].seed == 0
    assert [s.distill.weights for s in sets] == ["float32", "auto"] and sets[1].distill.batch == 4
    assert not sets[1].more_data
    cfg.more_data = [{"limit": 3}]
    with pytest.raises(UserError, match=r"more_data\[0\].*names no prompts"):
        prompt_sets(cfg)


needs_data = pytest.mark.skipif(
    importlib.util.find_spec("gensim") is None or importlib.util.find_spec("django") is None,
    reason="the category sources' packages (make install) are not installed",
)


@needs_data
def test_category_sources_build_deterministic_disjoint_prompts():
    rows, stats = build(list(cat.SOURCES))
    assert set(stats) == set(cat.SOURCES)
    by = {}
    for r in rows:
        by.setdefault(r["source"], []).append(r)
    assert {s: len(v) > 200 for s, v in by.items()} == {s: True for s in cat.SOURCES}
    cats = {s: {r["category"] for r in v} for s, v in by.items()}
    assert cats == {
        "wiki_summary": {"summarization"},
        "wiki_rag": {"rag"},
        "wiki_qa": {"qa"},
        "po_translation": {"translation"},
        "po_translation_more": {"translation"},
    }
    assert len({r["question_id"] for r in rows}) == len(rows)
    again = cat.wiki_rag()
    assert [r["turns"] for r in again] == [r["turns"] for r in by["wiki_rag"]]
    rag = by["wiki_rag"][0]["turns"][0]
    assert "Passage 1 (" in rag and "Passage 3 (" in rag and "\n\nQuestion: " in rag
    marks = ("{{", "}}", "[[", "]]", "<ref", "'''")  # TeX from <math> stays: it is prose there
    for r in by["wiki_summary"] + by["wiki_rag"]:
        assert not any(m in r["turns"][0] for m in marks), r["question_id"]


def test_tally_counts_answer_tokens_per_category(tmp_path):
    import torch

    from train import distill, tally

    def rec(qid, source, prompt, answer):
        ids = torch.arange(prompt + answer)
        return {
            "ids": ids,
            "start": prompt,
            "id": qid,
            "source": source,
            "temperature": 0.0,
            "turn": 0,
        }

    rows = [
        rec("sharegpt-1", "sharegpt", 5, 7),
        rec("chitchat-2", "chitchat", 3, 2),
        rec("train-0000", "templated", 4, 6),
        rec("wiki_rag-3", "wiki_rag", 9, 11),
        rec("po-de-x-1", "po_translation", 6, 4),
    ]
    distill.save_ids(rows, tmp_path / "shard-0000.npz", {}, 5)
    records, tokens = tally.tally(tmp_path, {"train-0000": "general"})
    assert tokens == {"chat": 9, "general": 6, "rag": 11, "translation": 4}
    assert records["chat"] == 2 and sum(records.values()) == 5
    assert "| x | all | 5 | 30 | chat 30% |" in tally.table({"x": (records, tokens)})
    with pytest.raises(UserError, match="holds no shard"):
        tally.tally(tmp_path / "empty")


def test_math_word_problems_are_seeded_and_whole():
    from train.wordproblems import math_word

    rows = math_word(draws=3)
    assert len(rows) == 3 * 24 and rows == math_word(draws=3)
    assert math_word(seed=1, draws=3) != rows
    assert {r["category"] for r in rows} == {"math"} and {r["source"] for r in rows} == {
        "math_word"
    }
    for r in rows:
        text = r["turns"][0]
        assert "{" not in text and "}" not in text and "?" in text, text


def test_code_tasks_quote_real_functions_as_valid_python():
    import ast

    from train.codetasks import KINDS, code_tasks

    rows = code_tasks()
    assert len(rows) > 1000 and rows == code_tasks()
    assert {r["question_id"].split("-", 1)[1].split(".")[0] for r in rows} == {"networkx", "sympy"}
    openings = {r["turns"][0].split("\n", 1)[0] for r in rows}
    assert len(openings) == len(KINDS)
    for r in rows[::25]:
        code = r["turns"][0].split("```python\n", 1)[1].rsplit("\n```", 1)[0]
        tree = ast.parse(code)  # the def line(s) and body, or the stub with its docstring
        assert isinstance(tree.body[0], ast.FunctionDef) and not tree.body[0].decorator_list


def test_training_data_joins_each_prompt_set_from_its_own_folder(tiny_target_dir, tmp_path):
    import json

    import numpy as np
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from groundfloor.paths import CONF
    from train.__main__ import training_data

    files = []
    sets = (("a", "tell me a story about a brave cat"), ("b", "add two and three please"))
    for name, words in sets:
        f = tmp_path / f"{name}.jsonl"
        w = words.split()
        f.write_text(
            "".join(
                json.dumps({"question_id": f"{name}{i}", "turns": [" ".join(w[i:] + w[:i])]}) + "\n"
                for i in range(5)
            )
        )
        files.append(f)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "drafter=medusa",
                f"target={tiny_target_dir}",
                f"prompts={files[0]}",
                f"more_data=[{{prompts: [{files[1]}], distill: {{batch: 3}}}}]",
                "states_target=float32",
                "states_engine={weights: float32}",  # the override form docs/training.md gives
                "max_new_tokens=6",
                "layers=[-1]",
                "distill.engine=lean",
                "distill.weights=float32",
                "distill.dtype=float32",
                "distill.kernel=aten",
                "distill.batch=4",
                f"distill.ids_dir={tmp_path / 'ids'}",
            ],
        )
    data, stats = training_data(cfg)
    assert set(stats) == {str(f) for f in files}  # a prompt file is its own source
    assert sorted(d["id"] for d in data) == [f"a{i}" for i in range(5)] + [
        f"b{i}" for i in range(5)
    ]
    folders = sorted(p.name for p in (tmp_path / "ids").iterdir())
    assert len(folders) == 2  # a set of its own each
    hows = set()
    for folder in folders:
        z = np.load(next((tmp_path / "ids" / folder).glob("shard-*.npz")))
        hows.add(json.loads(str(z["how"]))["batch"])
    assert hows == {3, 4}  # the second set's own settings
    assert all(d["hidden"][-1].shape[0] == len(d["ids"]) for d in data)
