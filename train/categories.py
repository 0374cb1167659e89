"""Training prompts for the categories chat leaves out: summarization, RAG, open QA and
translation into English, built from text shipped inside PyPI wheels.

    python -m train.sources wiki_summary wiki_rag wiki_qa po_translation   # counts

    source          package (version)   licence (package / data)         what we take
    wiki_summary    gensim (4.4.0)      LGPL-2.1 / Wikipedia CC BY-SA 3.0 the prose of the ~100
    wiki_rag                                                              English articles in its
    wiki_qa                                                               test dump, cleaned of
                                                                          wiki markup
    po_translation  Django (5.2)        BSD-3                            the translated strings
                                                                          of its .po catalogues
                                                                          (de, fr, es, it, nl, pt)
    po_translation_more Django (5.2)    BSD-3                            the same in twenty more
                                                                          languages (PO_MORE): a
                                                                          set of its own

Only the source text comes from the packages; the instructions and questions are ours, and the
answers are the target's own (train.distill). Each builder is deterministic (a seeded Random):
- wiki_summary: runs of consecutive paragraphs of one article (150–450 words), to summarize;
- wiki_rag: one passage of an article (the one its question is about) among two or three
  passages of other articles, numbered and titled, in a shuffled order;
- wiki_qa: open questions about an article's subject and its sections, without the article
  (Natural Questions style: the target answers from what it knows);
- po_translation: 3–8 consecutive strings of one catalogue (one application's messages, so they
  belong together), to translate into English.
Installed with `pip install --no-deps gensim==4.4.0 Django==5.2` (`make install`): only their
data files are read; neither package is imported.
"""

from __future__ import annotations

import bz2
import html
import importlib.util
import random
import re
from functools import lru_cache
from pathlib import Path

from groundfloor.errors import UserError

WIKI_FILE = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
PO_LANGS = {
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "it": "Italian",
    "nl": "Dutch",
    "pt": "Portuguese",
}
PO_MORE = {
    "sv": "Swedish",
    "da": "Danish",
    "nb": "Norwegian",
    "pl": "Polish",
    "cs": "Czech",
    "ro": "Romanian",
    "ca": "Catalan",
    "hu": "Hungarian",
    "fi": "Finnish",
    "id": "Indonesian",
    "sk": "Slovak",
    "sl": "Slovenian",
    "hr": "Croatian",
    "lt": "Lithuanian",
    "et": "Estonian",
    "tr": "Turkish",
    "lv": "Latvian",
    "eu": "Basque",
    "gl": "Galician",
    "is": "Icelandic",
}
SKIP_SECTIONS = {
    "see also",
    "references",
    "external links",
    "further reading",
    "notes",
    "bibliography",
    "sources",
    "footnotes",
    "citations",
    "works cited",
}
MIN_PARAGRAPH_WORDS = 40
INSTALL = "pip install --no-deps gensim==4.4.0 Django==5.2"


def _package_file(module: str, pip_name: str, rel: str = "") -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"training source needs the `{pip_name}` package's files: {INSTALL}")
    return Path(list(spec.submodule_search_locations)[0]) / rel


# --- Wikipedia markup -----------------------------------------------------------------------

_INNER_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_INNER_TABLE = re.compile(r"\{\|(?:(?!\{\|).)*?\|\}", re.S)
_INNER_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")
_DROP_LINK = re.compile(r"^\s*:?(file|image|category|media|[a-z]{2,3}(-[a-z]+)?):", re.I)


def _strip_nested(pattern: re.Pattern, text: str, repl="") -> str:
    while True:
        new = pattern.sub(repl, text)
        if new == text:
            return new
        text = new


def _link(m: re.Match) -> str:
    inner = m.group(1)
    if _DROP_LINK.match(inner):
        return ""
    return inner.split("|")[-1]


def _drop_files(text: str) -> str:
    """Remove [[File:...]] and [[Image:...]] with everything up to their matching brackets (a
    caption may hold links, and single brackets the link pattern cannot see past)."""
    out, i = [], 0
    for m in re.finditer(r"\[\[\s*(file|image):", text, re.I):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 0, m.start()
        while j < len(text) - 1:
            pair = text[j : j + 2]
            depth += (pair == "[[") - (pair == "]]")
            j += 2 if pair in ("[[", "]]") else 1
            if depth == 0:
                break
        i = j
    return "".join(out) + text[i:]


def clean_wikitext(text: str) -> str:
    """Wiki markup to plain text: templates, tables, references, files, categories and comments
    dropped; links replaced by their label; bold and italic marks removed. Headings stay as
    `== Name ==` lines (sections() splits on them)."""
    text = html.unescape(text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"<ref[^>/]*/>", "", text)
    text = re.sub(r"<ref[^>]*>.*?</ref>", "", text, flags=re.S)
    text = _strip_nested(_INNER_TEMPLATE, text)
    text = _strip_nested(_INNER_TABLE, text)
    text = _drop_files(text)
    text = _strip_nested(_INNER_LINK, text, _link)
    text = re.sub(r"\[https?://[^\s\]]+\s*([^\]]*)\]", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"'{2,}", "", text)
    return text


def sections(text: str) -> list[tuple[str, list[str]]]:
    """(section name, prose paragraphs) of a cleaned article, in order; the lead is "". Lists,
    indented lines and short fragments are not prose and are left out, as are the reference
    sections."""
    out, name, paras = [], "", []
    for line in text.split("\n"):
        line = line.strip()
        h = re.fullmatch(r"(={2,})\s*(.*?)\s*\1", line)
        if h:
            if paras:
                out.append((name, paras))
            name, paras = h.group(2), []
            continue
        if not line or line[0] in "*#:;|!{}":
            continue
        line = re.sub(r"\s+", " ", line)
        line = re.sub(r"\(\s*[,;]?\s*\)", "", line)  # what is left of a removed template
        if len(line.split()) >= MIN_PARAGRAPH_WORDS and name.lower() not in SKIP_SECTIONS:
            paras.append(line)
    if paras:
        out.append((name, paras))
    return out


@lru_cache(maxsize=1)
def wiki_articles() -> tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...]:
    """(title, ((section, paragraphs), ...)) for every article of the gensim test dump with
    prose (redirects and other namespaces left out)."""
    path = _package_file("gensim", "gensim", WIKI_FILE)
    xml = bz2.open(path, "rt", encoding="utf-8").read()
    out = []
    for page in re.findall(r"<page>.*?</page>", xml, re.S):
        if "<redirect" in page or "<ns>0</ns>" not in page:
            continue
        title = html.unescape(re.search(r"<title>(.*?)</title>", page).group(1))
        body = re.search(r"<text[^>]*>(.*?)</text>", page, re.S)
        secs = sections(clean_wikitext(body.group(1) if body else ""))
        if secs:
            out.append((title, tuple((n, tuple(p)) for n, p in secs)))
    return tuple(out)


def _chunks(paras, lo: int, hi: int) -> list[str]:
    """Runs of consecutive paragraphs of lo..hi words (a paragraph longer than hi stands alone
    when it is at most 1.5·hi)."""
    out, cur, n = [], [], 0
    for p in paras:
        w = len(p.split())
        if cur and n + w > hi:
            if n >= lo:
                out.append("\n\n".join(cur))
            cur, n = [], 0
        if w <= hi * 1.5:
            cur.append(p)
            n += w
    if cur and n >= lo:
        out.append("\n\n".join(cur))
    return out


SUMMARY_ASKS = [
    "Summarize this text in a few sentences.",
    "Write a short summary of the passage below.",
    "Give a brief summary (two to four sentences) of the following text.",
    "What are the main points of this passage? Answer in a short paragraph.",
    "Condense the following text into a one-paragraph summary.",
    "Read the text and summarize it for someone who has not read it.",
    "Provide a concise summary of the excerpt below.",
    "Sum up the following passage in plain words.",
]


def wiki_summary(seed: int = 11) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for title, secs in wiki_articles():
        paras = [p for _, ps in secs for p in ps]
        for i, chunk in enumerate(_chunks(paras, 150, 450)):
            ask = rng.choice(SUMMARY_ASKS)
            head = f"{ask}\n\n" + (f"Title: {title}\n\n" if rng.random() < 0.5 else "")
            rows.append(_row(f"wiki_summary-{title}-{i}", "wiki_summary", head + chunk))
    return rows


RAG_MAX = 1500  # questions, on passages drawn from the ~2,500 (each prompt is ~700 tokens)
RAG_ASKS = [
    "Answer the question using the passages below.",
    "Use only the following passages to answer the question, and say which passage you used.",
    "Here are some passages. Answer the question at the end based on them.",
    "Read the documents and answer the question. If the documents do not say, answer that.",
]
RAG_QUESTIONS = [
    "What does the text say about {s} in the context of {t}?",
    "Describe {s} of {t}.",
    "According to the passages, what is notable about {t}'s {s}?",
    "Summarize what is said about {s} for {t}.",
]
LEAD_QUESTIONS = [
    "What is {t}?",
    "Who or what is {t}, according to the passages?",
    "Give a short description of {t} based on the documents.",
]


def wiki_rag(seed: int = 12) -> list[dict]:
    rng = random.Random(seed)
    arts = wiki_articles()
    pool = [(t, s, c) for t, secs in arts for s, ps in secs for c in _chunks(ps, 60, 200)]
    asked = sorted(rng.sample(range(len(pool)), min(RAG_MAX, len(pool))))
    rows = []
    for i in asked:
        title, sec, chunk = pool[i]
        others = [x for x in rng.sample(pool, 6) if x[0] != title][: rng.choice((2, 3))]
        docs = [(title, chunk)] + [(t, c) for t, _, c in others]
        rng.shuffle(docs)
        ask = rng.choice(RAG_ASKS)
        q = (
            rng.choice(RAG_QUESTIONS).format(s=sec.lower(), t=title)
            if sec
            else rng.choice(LEAD_QUESTIONS).format(t=title)
        )
        body = "\n\n".join(f"Passage {j + 1} ({t}): {c}" for j, (t, c) in enumerate(docs))
        rows.append(_row(f"wiki_rag-{i}", "wiki_rag", f"{ask}\n\n{body}\n\nQuestion: {q}"))
    return rows


QA_ABOUT = [
    "What is {t}, and why is it significant?",
    "Can you give me a short overview of {t}?",
    "What are the most important facts about {t}?",
    "Explain {t} to a high school student.",
    "What should everyone know about {t}?",
]
QA_SECTION = [
    "What can you tell me about the {s} of {t}?",
    "How would you describe {t}'s {s}?",
    "Briefly explain the {s} of {t}.",
]


def wiki_qa(seed: int = 13) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for title, secs in wiki_articles():
        for k, q in enumerate(rng.sample(QA_ABOUT, 2)):
            rows.append(_row(f"wiki_qa-{title}-{k}", "wiki_qa", q.format(t=title)))
        for sec, _ in secs:
            if sec:
                q = rng.choice(QA_SECTION).format(s=sec.lower(), t=title)
                rows.append(_row(f"wiki_qa-{title}-{sec}", "wiki_qa", q))
    return rows


# --- .po catalogues -------------------------------------------------------------------------

_PO_ENTRY = re.compile(r'^msgstr(?:\[0\])? ((?:"(?:[^"\\]|\\.)*"\s*\n?)+)', re.M)


def po_strings(text: str) -> list[str]:
    """The translated strings of a .po file, in order: msgstr (a plural's first form), its
    quoted pieces joined, escapes read; the header (empty msgid) and empty msgstr left out."""
    out = []
    for m in _PO_ENTRY.finditer(text):
        s = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)))
        s = s.replace("\\n", " ").replace('\\"', '"').replace("\\\\", "\\").strip()
        if s and "Content-Type:" not in s and len(s.split()) >= 2:
            out.append(s)
    return out


TRANSLATE_ASKS = [
    "Translate the following {l} text into English:",
    "Please translate this from {l} to English.",
    "Translate into English (the text is {l}):",
    "What is this {l} text in English?",
    "Give an English translation of these {l} sentences:",
]


def po_translation(
    seed: int = 14, langs: dict[str, str] = PO_LANGS, source: str = "po_translation"
) -> list[dict]:
    rng = random.Random(seed)
    root = _package_file("django", "Django")
    rows = []
    for code, lang in langs.items():
        for f in sorted(root.glob(f"**/locale/{code}/LC_MESSAGES/*.po")):
            strings = po_strings(f.read_text(encoding="utf-8"))
            i = 0
            while i < len(strings):
                n = rng.randint(3, 8)
                group = strings[i : i + n]
                i += n
                ask = rng.choice(TRANSLATE_ASKS).format(l=lang)
                sep = "\n" if rng.random() < 0.5 else " "
                app = f.relative_to(root).parts[:-3]
                qid = f"po-{code}-{'-'.join(app)}-{f.stem}-{i}"
                rows.append(_row(qid, source, f"{ask}\n\n{sep.join(group)}"))
    return rows


def po_translation_more(seed: int = 17) -> list[dict]:
    """po_translation over twenty more languages of Latin script (a set of its own: the first
    set's selection stays as it was built)."""
    return po_translation(seed, PO_MORE, "po_translation_more")


def _row(qid: str, source: str, text: str) -> dict:
    return {"question_id": qid, "category": CATEGORY[source], "turns": [text], "source": source}


CATEGORY = {  # each source's category (train.tally reads it too)
    "wiki_summary": "summarization",
    "wiki_rag": "rag",
    "wiki_qa": "qa",
    "po_translation": "translation",
    "po_translation_more": "translation",
}
SOURCES = {
    "wiki_summary": wiki_summary,
    "wiki_rag": wiki_rag,
    "wiki_qa": wiki_qa,
    "po_translation": po_translation,
    "po_translation_more": po_translation_more,
}
LICENCES = {
    "wiki_summary": "Wikipedia text CC BY-SA 3.0 (gensim 4.4.0's test dump, LGPL-2.1)",
    "wiki_rag": "Wikipedia text CC BY-SA 3.0 (gensim 4.4.0's test dump, LGPL-2.1)",
    "wiki_qa": "Wikipedia titles and section names (gensim 4.4.0's test dump, LGPL-2.1)",
    "po_translation": "BSD-3 (Django 5.2's translation catalogues)",
    "po_translation_more": "BSD-3 (Django 5.2's translation catalogues)",
}
