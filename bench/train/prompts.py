"""The training prompt set: generated from our own topics and templates, never from benchmarks.

    python -m bench.train.prompts            # (re)writes train/prompts/train.jsonl

Deterministic (fixed seed). Drafters learn the target's continuations of these prompts, so they
must share no long n-gram with any benchmark prompt: `tasks.overlap` checks that in the tests.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "train" / "prompts" / "train.jsonl"

TOPICS = """volcanoes; honeybees; the printing press; compound interest; black holes; coral reefs;
sourdough bread; the water cycle; electric cars; chess openings; photosynthesis; the Roman roads;
solar panels; vaccines; jazz music; glaciers; the stock market; recycling plastics; octopuses;
bicycles; rainforests; the immune system; lighthouses; tea ceremonies; earthquakes; satellites;
origami; public libraries; wind turbines; migratory birds; the human heart; board games;
cheese making; deserts; submarines; the moon landing; mushrooms; typography; rivers and deltas;
sleep; coffee farming; the internet; tides; bridges; renewable energy; dinosaurs; bees and
flowers; traffic lights; paper money; telescopes; sea turtles; hiking safety; gardening in small
spaces; remote work; time zones; fermentation; marathon training; the periodic table; kites""".replace("\n", " ")

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
    "German": ["Der Bus kommt heute später als sonst.", "Wir haben am Wochenende einen Ausflug "
               "in die Berge gemacht.", "Die neue Bibliothek öffnet im Frühling.", "Mein Bruder "
               "kocht gern italienische Gerichte.", "Das Wetter war gestern sehr windig.",
               "Die Kinder spielen im Garten Fußball."],
    "French": ["Le marché du samedi attire beaucoup de monde.", "Nous avons visité un vieux "
               "château près de la rivière.", "Ma voisine apprend à jouer du piano.", "Le train "
               "pour Lyon part à huit heures.", "Il faut arroser les plantes chaque matin.",
               "Les musées sont gratuits le premier dimanche du mois."],
}


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
    rng.shuffle(rows)
    seen, out = set(), []
    for cat, text in rows:
        if text not in seen:
            seen.add(text)
            out.append({"question_id": f"train-{len(out):04d}", "category": cat, "turns": [text]})
    return out


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    rows = build()
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} training prompts → {OUT}")


if __name__ == "__main__":
    main()
