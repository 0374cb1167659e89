"""The training prompt set: generated from our own topics and templates, never from benchmarks.

    python -m train.prompts            # (re)writes train/prompts/train.jsonl and focus.jsonl

Deterministic (fixed seed). Drafters learn the target's continuations of these prompts, so they
must share no long n-gram with any benchmark prompt: `tasks.overlap` checks that in the tests.
"""

from __future__ import annotations

import json
import random

from groundfloor.paths import ROOT

OUT = ROOT / "train" / "prompts" / "train.jsonl"
FOCUS_OUT = OUT.with_name("focus.jsonl")

TOPICS = """volcanoes; honeybees; the printing press; compound interest; black holes; coral reefs;
sourdough bread; the water cycle; electric cars; chess openings; photosynthesis; the Roman roads;
solar panels; vaccines; jazz music; glaciers; the stock market; recycling plastics; octopuses;
bicycles; rainforests; the immune system; lighthouses; tea ceremonies; earthquakes; satellites;
origami; public libraries; wind turbines; migratory birds; the human heart; board games;
cheese making; deserts; submarines; the moon landing; mushrooms; typography; rivers and deltas;
sleep; coffee farming; the internet; tides; bridges; renewable energy; dinosaurs; bees and
flowers; traffic lights; paper money; telescopes; sea turtles; hiking safety; gardening in small
spaces; remote work; time zones; fermentation; marathon training; the periodic table; kites""".replace(
    "\n", " "
)

TEMPLATES = [
    "Explain {t} to a curious twelve-year-old.",
    "Give me five interesting facts about {t}.",
    "Write a short story in which {t} plays an important part.",
    "Write a four-line poem about {t}.",
    "What are the main advantages and disadvantages of {t}?",
    "Describe the history of {t} in a few paragraphs.",
    "I am giving a two-minute talk on {t}. Draft it for me.",
    "Compare {t} with {u}. How are they alike and how do they differ?",
    "Write a friendly email inviting my team to a workshop about {t}.",
    "What are common misconceptions about {t}?",
    "Summarize what a beginner should know about {t} in three bullet points.",
    "Create a quiz of four questions, with answers, about {t}.",
]

CODE = [
    "Write a Python function that returns the {n} largest numbers in a list.",
    "Write a Python function that counts how often each word appears in a string.",
    "Write a Python class for a simple bank account with deposit and withdraw methods.",
    "Write a JavaScript function that removes duplicate values from an array.",
    "Write a Python function that checks whether a string is a palindrome, ignoring case.",
    "Write a SQL query that finds the {n} customers with the highest total order value.",
    "Write a Python function that converts a temperature from Celsius to Fahrenheit.",
    "Write a Python generator that yields the first {n} Fibonacci numbers.",
    "Write a Bash script that prints the {n} largest files in the current directory.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a Python function that flattens a nested list of integers.",
    "Write a C function that reverses a string in place.",
    "Explain what this Python code does and suggest an improvement: `print(sum([x*x for x in range({n})]))`",
    "Write unit tests with pytest for a function add(a, b) that adds two numbers.",
]

MATH = [
    "A shop sells pencils at {a} cents each. How much do {b} pencils cost in dollars? Show your steps.",
    "A train travels {a} kilometres in {b} hours. What is its average speed? Explain step by step.",
    "Sam has {a} marbles and gives away {b}. He then doubles what is left. How many does he have?",
    "A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
    "If {a} workers build a wall in {b} days, how long would twice as many workers take? Explain.",
    "What is {a} percent of {b}? Show the calculation.",
]

SENTENCES = {
    "German": [
        "Der Bus kommt heute später als sonst.",
        "Wir haben am Wochenende einen Ausflug in die Berge gemacht.",
        "Die neue Bibliothek öffnet im Frühling.",
        "Mein Bruder kocht gern italienische Gerichte.",
        "Das Wetter war gestern sehr windig.",
        "Die Kinder spielen im Garten Fußball.",
    ],
    "French": [
        "Le marché du samedi attire beaucoup de monde.",
        "Nous avons visité un vieux château près de la rivière.",
        "Ma voisine apprend à jouer du piano.",
        "Le train pour Lyon part à huit heures.",
        "Il faut arroser les plantes chaque matin.",
        "Les musées sont gratuits le premier dimanche du mois.",
    ],
}


def numbered(rows: list[tuple[str, str]], rng: random.Random, prefix: str) -> list[dict]:
    """Shuffle (category, text) rows, drop repeated texts, number them as prompt rows."""
    rng.shuffle(rows)
    seen, out = set(), []
    for cat, text in rows:
        if text not in seen:
            seen.add(text)
            out.append(
                {"question_id": f"{prefix}-{len(out):04d}", "category": cat, "turns": [text]}
            )
    return out


def build(seed: int = 1234) -> list[dict]:
    rng = random.Random(seed)
    topics = [t.strip() for t in TOPICS.split(";") if t.strip()]
    rows = []
    for t in topics:
        for tpl in rng.sample(TEMPLATES, 8):
            rows.append(("general", tpl.format(t=t, u=rng.choice(topics))))
    for tpl in CODE:
        for _ in range(3):
            rows.append(("code", tpl.format(n=rng.randint(3, 20))))
    for tpl in MATH:
        for _ in range(6):
            rows.append(("math", tpl.format(a=rng.randint(3, 90), b=rng.randint(2, 12))))
    for lang, sents in SENTENCES.items():
        for _ in range(12):
            text = " ".join(rng.sample(sents, 3))
            rows.append(("translation", f"Please translate into English: {text}"))
    return numbered(rows, rng, "train")


# --- the focus set: more of the request styles the general set has few of (code given as a
# stub or a bug, multi-step arithmetic, translation, role play and extraction) ------------------

FUNCS = [
    (
        "moving_average",
        "values: list[float], window: int",
        "list[float]",
        "Return the averages of every run of `window` consecutive values.",
    ),
    (
        "group_by_length",
        "words: list[str]",
        "dict[int, list[str]]",
        "Map each word length to the words of that length, in their original order.",
    ),
    (
        "parse_duration",
        "text: str",
        "int",
        "Turn strings like '1h30m' or '45s' into a number of seconds.",
    ),
    (
        "rotate_matrix",
        "m: list[list[int]]",
        "list[list[int]]",
        "Return the square matrix rotated 90 degrees clockwise.",
    ),
    (
        "top_k_frequent",
        "items: list[str], k: int",
        "list[str]",
        "Return the k most common items, most common first; ties keep first appearance.",
    ),
    (
        "is_valid_ipv4",
        "address: str",
        "bool",
        "Tell whether the string is a dotted IPv4 address with parts from 0 to 255.",
    ),
    (
        "merge_intervals",
        "intervals: list[tuple[int, int]]",
        "list[tuple[int, int]]",
        "Merge overlapping closed intervals and return them sorted by start.",
    ),
    ("camel_to_snake", "name: str", "str", "Convert a camelCase identifier to snake_case."),
    (
        "running_max",
        "values: list[int]",
        "list[int]",
        "Return, for each position, the largest value seen so far.",
    ),
    (
        "count_vowels",
        "text: str",
        "dict[str, int]",
        "Count each vowel in the text, ignoring case; vowels that never occur are left out.",
    ),
    (
        "safe_divide",
        "a: float, b: float, default: float = 0.0",
        "float",
        "Divide a by b, returning default when b is zero.",
    ),
    (
        "dedupe_keep_order",
        "items: list",
        "list",
        "Remove repeated items while keeping the first occurrence of each.",
    ),
    (
        "binary_search",
        "sorted_values: list[int], target: int",
        "int",
        "Return the index of target in the sorted list, or -1 when it is absent.",
    ),
    (
        "word_wrap",
        "text: str, width: int",
        "list[str]",
        "Wrap text into lines no longer than width, breaking between words.",
    ),
    (
        "histogram",
        "values: list[int], bins: int",
        "list[int]",
        "Count how many values fall into each of `bins` equal-width bins over their range.",
    ),
    (
        "matrix_multiply",
        "a: list[list[float]], b: list[list[float]]",
        "list[list[float]]",
        "Multiply two matrices given as lists of rows; raise ValueError on a shape mismatch.",
    ),
]
BUGS = [
    (
        "returns the sum of the even numbers",
        "def sum_even(xs):\n    total = 0\n    for x in xs:\n"
        "        if x % 2:\n            total += x\n    return total",
        "adds the odd ones",
    ),
    (
        "returns the last n lines of a file",
        "def tail(path, n):\n    with open(path) as f:\n"
        "        lines = f.readlines()\n    return lines[n:]",
        "returns the wrong lines",
    ),
    (
        "counts the words in a sentence",
        "def count_words(s):\n    return len(s.split(' '))",
        "miscounts when there are double spaces",
    ),
    ("reverses a dictionary", "def invert(d):\n    return {v: k for k, v in d}", "raises an error"),
    (
        "finds the maximum of a list",
        "def find_max(xs):\n    best = 0\n    for x in xs:\n"
        "        if x > best:\n            best = x\n    return best",
        "is wrong for lists of negative numbers",
    ),
]
MATH_FOCUS = [
    "A bakery makes {a} loaves every morning and sells {b} of them before noon. In the afternoon it "
    "sells half of the rest. How many loaves are left at closing? Think step by step.",
    "A cinema ticket costs {a} dollars and popcorn costs {b} dollars. A family of four buys four "
    "tickets and two popcorns. What do they pay in total? Explain your reasoning.",
    "Maria reads {a} pages a day. Her book has {b}0 pages. After how many days does she finish it? "
    "Show the working.",
    "A tank holds {a}0 litres and leaks {b} litres per hour. How long until it is half empty? "
    "Solve it step by step.",
    "A farmer plants {a} rows of trees with {b} trees in each row, then removes 3 trees from every "
    "row. How many trees remain? Give the final number at the end.",
    "Tom saves {b} dollars a week and already has {a} dollars. How many weeks until he can buy a "
    "bike that costs 200 dollars? Explain each step.",
]
SENTENCES_FOCUS = {
    "German": [
        "Ich habe meinen Regenschirm im Café vergessen.",
        "Der Zug hatte zwanzig Minuten Verspätung.",
        "Am Abend gehen wir oft am See spazieren.",
        "Die Suppe schmeckt heute besonders gut.",
        "Unsere Nachbarn haben einen kleinen Hund.",
    ],
    "French": [
        "J'ai oublié mon parapluie au café.",
        "Le boulanger ouvre sa boutique très tôt.",
        "Nous partons en vacances à la fin du mois.",
        "Cette rue est calme le dimanche.",
        "Mon frère répare des vélos le week-end.",
    ],
    "Spanish": [
        "La biblioteca cierra a las ocho.",
        "Mañana vamos a visitar a mis abuelos.",
        "El café de la esquina tiene buenos pasteles.",
        "Hace mucho calor en verano.",
    ],
}
ROLES = [
    "a museum guide",
    "a ship's captain",
    "a patient chemistry teacher",
    "a travel agent",
    "a detective in a quiet village",
    "a chef explaining a recipe",
    "a park ranger",
]
EXTRACT = [
    "From this note, list every date and what happens on it: 'The kickoff is on {a} March, the "
    "review on {b} April, and the launch party on the last Friday of May.'",
    "Extract the names and ages as a JSON list: 'Ana is {a}, her cousin Ben is {b}, and their "
    "neighbour Carla turned 40 last week.'",
    "Pull out the prices from this text and add them up: 'Bread {b} dollars, cheese {a} dollars, "
    "and a bag of apples for 3 dollars.'",
]


def _focus_code() -> list[tuple[str, str]]:
    """The focus set's code prompts: each function of FUNCS to implement, to write from a
    description, and to test; each bug of BUGS to fix and to review."""
    rows = []
    for name, args, ret, doc in FUNCS:
        rows.append(
            (
                "code",
                f"Implement this function:\n\n```python\ndef {name}({args}) -> "
                f'{ret}:\n    """{doc}"""\n```',
            )
        )
        rows.append(
            (
                "code",
                f"Write a Python function {name}({args}) that does the following. "
                f"{doc} Include a short example of its use.",
            )
        )
        rows.append(("code", f"Write pytest tests for a function {name}({args}) -> {ret}. {doc}"))
    for what, code, symptom in BUGS:
        rows.append(
            (
                "code",
                f"This function is meant to do one thing: it {what}. It {symptom}. "
                f"Find the bug and fix it:\n\n```python\n{code}\n```",
            )
        )
        rows.append(
            (
                "code",
                f"Review this code, which {what}, and explain what goes wrong:\n\n"
                f"```python\n{code}\n```",
            )
        )
    return rows


def build_focus(seed: int = 4321) -> list[dict]:
    rng = random.Random(seed)
    rows = _focus_code()
    for tpl in MATH_FOCUS:
        for _ in range(7):
            rows.append(("math", tpl.format(a=rng.randint(4, 60), b=rng.randint(2, 9))))
    for lang, sents in SENTENCES_FOCUS.items():
        for _ in range(10):
            text = " ".join(rng.sample(sents, 2))
            rows.append(("translation", f"Translate this {lang} text into English: {text}"))
    topics = [t.strip() for t in TOPICS.split(";") if t.strip()]
    for role in ROLES:
        for _ in range(4):
            t = rng.choice(topics)
            rows.append(
                (
                    "general",
                    f"Pretend to be {role}. A visitor asks you about {t}. "
                    f"Answer in character in a few sentences.",
                )
            )
    for tpl in EXTRACT:
        for _ in range(5):
            rows.append(("general", tpl.format(a=rng.randint(2, 28), b=rng.randint(2, 28))))
    return numbered(rows, rng, "focus")


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    for path, rows in ((OUT, build()), (FOCUS_OUT, build_focus())):
        path.write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
        print(f"{len(rows)} training prompts → {path}")


if __name__ == "__main__":
    main()
