"""Spec-Bench's 13 question categories mapped onto specsweep's seven task categories, and back.

Forward (reading question files): MT-Bench's eight → dialog, math_reasoning → reasoning, the
rest by name. Back (writing answer files, bench/outputs/answers.py): the category Spec-Bench's
evaluation/speed.py filters on, so its per-task report reads our runs.
"""

MT_BENCH = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
)
CATEGORY_MAP = {
    # MT-Bench's eight two-turn categories
    **{c: "dialog" for c in MT_BENCH},
    # Spec-Bench's own groups
    "translation": "translation",
    "summarization": "summarization",
    "qa": "qa",
    "math_reasoning": "reasoning",
    "rag": "rag",
}
CATEGORIES = ("dialog", "code", "reasoning", "translation", "summarization", "qa", "rag")


def map_category(raw: str) -> str:
    """Our category for a Spec-Bench category; other names (our own: dialog, code) pass through.

    Spec-Bench's names win: its `reasoning` is MT-Bench's two-turn reasoning (→ dialog); our
    math word problems are its `math_reasoning`."""
    return CATEGORY_MAP.get(raw, raw)


def specbench_category(category: str, subcategory: str = "") -> str:
    """Spec-Bench's name for one of our prompts: dialog keeps its MT-Bench sub-category."""
    if category == "dialog":
        return subcategory if subcategory in MT_BENCH else "dialog"
    if category == "reasoning":
        return "math_reasoning"
    return category
