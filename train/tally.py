"""Answer tokens per category in self-distillation data: what the drafters learn from.

    python -m train.tally [FOLDER ...]      # default: every data folder of the embedded target

A record's category is its source's: chat for sharegpt and chitchat, the prompt's own category
for the templated sets (train/prompts/*.jsonl), train.sources.CATEGORIES for the rest. Prints
one table: records and answer tokens per category, and the share of chat, for each folder and
all together.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from groundfloor.errors import UserError
from groundfloor.paths import ROOT
from train.sources import CATEGORIES

DATA = ROOT / "artifacts" / "smollm2-135m" / "data"
CHAT = {"sharegpt", "chitchat"}


def templated_categories() -> dict[str, str]:
    out = {}
    for f in sorted((ROOT / "train" / "prompts").glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                out[r["question_id"]] = r.get("category", "general")
    return out


def category(source: str, qid: str, templated: dict[str, str]) -> str:
    if source in CHAT:
        return "chat"
    if source in CATEGORIES:
        return CATEGORIES[source]
    return templated.get(qid.split("/")[0], source)


def tally(folder: Path, templated: dict[str, str] | None = None) -> tuple[Counter, Counter]:
    """(records, answer tokens) per category over a folder's shard files."""
    templated = templated_categories() if templated is None else templated
    records, tokens = Counter(), Counter()
    shards = sorted(folder.glob("shard-*.npz"))
    if not shards:
        raise UserError(f"{folder} holds no shard-*.npz files; give a distillation data folder")
    for f in shards:
        z = np.load(f)
        answers = z["lengths"] - z["starts"]
        for src, qid, n in zip(z["source"].tolist(), z["qid"].tolist(), answers.tolist()):
            c = category(str(src), str(qid), templated)
            records[c] += 1
            tokens[c] += int(n)
    return records, tokens


def table(rows: dict[str, tuple[Counter, Counter]]) -> str:
    lines = ["| data | category | records | answer tokens | share |", "|---|---|---|---|---|"]
    for name, (rec, tok) in rows.items():
        total = sum(tok.values())
        for c in sorted(tok, key=tok.get, reverse=True):
            lines.append(f"| {name} | {c} | {rec[c]} | {tok[c]} | {tok[c] / total:.0%} |")
        lines.append(
            f"| {name} | all | {sum(rec.values())} | {total} | chat {tok['chat'] / total:.0%} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    try:
        folders = [Path(a) for a in argv] or sorted(p for p in DATA.iterdir() if p.is_dir())
        templated = templated_categories()
        rows = {f.name: tally(f, templated) for f in folders}
        if len(rows) > 1:
            rec, tok = Counter(), Counter()
            for r, t in rows.values():
                rec.update(r)
                tok.update(t)
            rows["together"] = (rec, tok)
        print(table(rows))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
