"""Spec-Bench's 13 question categories mapped onto specsweep's seven task categories."""

CATEGORY_MAP = {
    # MT-Bench's eight two-turn categories
    "writing": "dialog", "roleplay": "dialog", "reasoning": "dialog", "math": "dialog",
    "coding": "dialog", "extraction": "dialog", "stem": "dialog", "humanities": "dialog",
    # Spec-Bench's own groups
    "translation": "translation",
    "summarization": "summarization",
    "qa": "qa",
    "math_reasoning": "reasoning",
    "rag": "rag",
}
CATEGORIES = ("dialog", "code", "reasoning", "translation", "summarization", "qa", "rag")


def map_category(raw: str) -> str:
    """Our category for a Spec-Bench category; our own names pass through."""
    if raw in CATEGORIES:
        return raw
    return CATEGORY_MAP.get(raw, raw)
