"""Code prompts for training: tasks built on real functions of BSD-licensed Python packages
(the `code_tasks` source of train.sources).

    package (version)     licence   what we take
    networkx (3.6.1)      BSD-3     public top-level functions with a docstring, 4–80 lines
    sympy (1.14.0)        BSD-3     the same (at most PER_PACKAGE of each, drawn)

Both are installed with torch. A function gives one prompt, its kind drawn per function:
implement it from its signature and the first paragraph of its docstring; explain what its
code does; write pytest tests for it; or find what could go wrong in it (edge cases). The
source is read with `ast` from the files; neither package is imported. The prompts go through
the overlap removal against the benchmarks (HumanEval among them) like every other source.
"""

from __future__ import annotations

import ast
import importlib.util
import random
from pathlib import Path

from groundfloor.errors import UserError

CATEGORY = "code"
PACKAGES = ("networkx", "sympy")
PER_PACKAGE = 900  # at most, drawn from each package's functions
MAX_LINES, MIN_LINES = 80, 4
MAX_CHARS = 2400


def _functions(package: str):
    """(module path, name, source without its docstring, signature, docstring's first
    paragraph) for the package's public top-level functions, files in sorted order."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"training source code_tasks needs `{package}` installed (make install)")
    root = Path(list(spec.submodule_search_locations)[0])
    for f in sorted(root.rglob("*.py")):
        if "tests" in f.parts or "benchmarks" in f.parts:
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines()
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            n = node.end_lineno - node.lineno + 1
            if not doc or not MIN_LINES <= n <= MAX_LINES:
                continue
            first = node.body[0]
            body = lines[first.end_lineno : node.end_lineno]  # the code after the docstring
            head = lines[node.lineno - 1 : first.lineno - 1]  # the def line(s), no decorators
            if not body or not head:
                continue
            code = "\n".join(head + body)
            summary = doc.strip().split("\n\n")[0].strip()
            mod = ".".join(f.relative_to(root.parent).with_suffix("").parts)
            yield mod, node.name, code, "\n".join(head), summary


def _prompt(kind: str, code: str, signature: str, summary: str) -> str:
    fence = "```python\n{}\n```"
    if kind == "implement":
        doc = "\n".join("    " + x if x.strip() else "" for x in f'"""{summary}\n"""'.split("\n"))
        return "Implement this function:\n\n" + fence.format(f"{signature}\n{doc}")
    if kind == "explain":
        return "Explain what this Python function does, step by step:\n\n" + fence.format(code)
    if kind == "tests":
        return "Write pytest unit tests for this function:\n\n" + fence.format(code)
    return (
        "Review this function: which inputs could make it fail or return a wrong result?\n\n"
        + fence.format(code)
    )


KINDS = ("implement", "explain", "tests", "review")


def code_tasks(seed: int = 16) -> list[dict]:
    r = random.Random(seed)
    rows = []
    for package in PACKAGES:
        found = list(_functions(package))
        for mod, name, code, signature, summary in sorted(
            r.sample(found, min(PER_PACKAGE, len(found))), key=lambda f: (f[0], f[1])
        ):
            kind = r.choice(KINDS)
            text = _prompt(kind, code, signature, summary)
            if len(text) > MAX_CHARS or (kind == "implement" and len(summary.split()) < 5):
                continue
            rows.append(
                {
                    "question_id": f"code_tasks-{mod}.{name}",
                    "category": CATEGORY,
                    "turns": [text],
                    "source": "code_tasks",
                }
            )
    return rows
