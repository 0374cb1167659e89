"""Math word problems for training prompts: our own templates, drawn with seeded names,
objects and numbers (the `math_word` source of train.sources).

Each template is a multi-step problem of the kind grade-school math benchmarks ask (rates,
money, fractions, percentages, ages, time, geometry); the numbers are drawn so that the
quantities stay whole where a person would expect them to. Only the question is written here:
the target answers it (train.distill), so a wrong answer of the target's is what it says. The
wording is ours, and every prompt still goes through the overlap removal against the benchmarks.
"""

from __future__ import annotations

import random

NAMES = [
    "Maya",
    "Omar",
    "Lena",
    "Kwame",
    "Sofia",
    "Ravi",
    "Chen",
    "Ines",
    "Tariq",
    "Noor",
    "Felix",
    "Amara",
    "Jonas",
    "Priya",
    "Mateo",
    "Hana",
    "Dmitri",
    "Zara",
    "Lucas",
    "Aiko",
]
ITEMS = [
    ("notebook", "notebooks"),
    ("apple", "apples"),
    ("ticket", "tickets"),
    ("sticker", "stickers"),
    ("candle", "candles"),
    ("plant", "plants"),
    ("mug", "mugs"),
    ("scarf", "scarves"),
    ("battery", "batteries"),
    ("comic", "comics"),
]
CATEGORY = "math"
PART = {2: "half", 3: "a third", 4: "a quarter", 5: "a fifth", 6: "a sixth"}
PLACES = ["the market", "a bookshop", "the school fair", "a garden centre", "the museum shop"]
ASKS = [
    "",
    " Think step by step.",
    " Show your work.",
    " Explain your reasoning, then give the final answer.",
    " Solve it step by step and state the answer at the end.",
    " Give the answer with a short explanation.",
]


def _problems(r: random.Random) -> list[str]:
    """One draw of every template (names, objects and numbers from r)."""
    a, b = r.sample(NAMES, 2)
    one, many = r.choice(ITEMS)
    place = r.choice(PLACES)
    n, m, k = r.randint(3, 19), r.randint(2, 9), r.randint(2, 6)
    price, cents = r.randint(2, 40), r.choice([25, 50, 75])
    pct = r.choice([10, 15, 20, 25, 30, 40])
    speed, hours = r.randint(30, 95), r.randint(2, 7)
    w, h = r.randint(4, 30), r.randint(3, 20)
    age = r.randint(6, 40)
    return [
        f"{a} buys {n} {many} at {place} for ${price}.{cents:02d} each and pays with a ${(n * price // 50 + 1) * 50} bill. How much change does {a} get?",
        f"{a} has {n * k} {many}. {a} gives {b} {PART[k]} of them and then buys {m} more. How many {many} does {a} have now?",
        f"A {one} costs ${price}. During a sale every price is cut by {pct}%. How much do {m} {many} cost in the sale?",
        f"A car travels at {speed} km/h for {hours} hours, then at {speed - 10} km/h for {m} more hours. How far does it travel in total, and what is its average speed?",
        f"{a} is {age} years old. {b} is {k} times as old as {a} was {age // 2} years ago. How old will {b} be in {m} years?",
        f"A rectangular garden is {w} m long and {h} m wide. A path 1 m wide runs around the outside of it. What is the area of the path?",
        f"{a} reads {n} pages on weekdays and {2 * n} pages on each weekend day. How many pages does {a} read in {k} weeks?",
        f"A tank holds {n * 20} litres. It is filled at {m * 2} litres a minute while water leaks out at {m} litres a minute. How long does it take to fill the empty tank?",
        f"{a} and {b} share ${n * (k + 1) * 10} in the ratio {k}:1. How much more does {a} get than {b}?",
        f"A school orders {n * 12} {many} packed in boxes of {m * 2}. A full box costs ${price}. How many boxes are needed and what do they cost?",
        f"A phone plan costs ${price} a month plus ${cents / 100:.2f} for each gigabyte over {m} GB. {a} used {m + k} GB this month. What is the bill?",
        f"In a class of {n * 2 + 10} students, {pct}% walk to school, a quarter of the rest take the bus, and the others are driven. How many students are driven?",
        f"{a} runs {k} laps of a {w * 20} m track every day for {m} days. How many kilometres is that?",
        f"A recipe needs {k} eggs for {m * 2} pancakes. How many eggs are needed for {m * 2 * n} pancakes, and how many boxes of 6 eggs is that?",
        f"The sum of two numbers is {n * 10 + m} and their difference is {m}. What are the two numbers?",
        f"A shop marks a {one} up by {pct}% over its cost of ${price * 10}, then offers {pct // 2}% off the marked price. What profit does the shop make on one {one}?",
        f"{a} starts work at 8:{cents % 60:02d} and works for {hours} hours and {n * 3} minutes, with a {m * 5}-minute break. When does {a} finish?",
        f"A train leaves at {speed} km/h. Another leaves the same station {k} hours later at {speed + 20} km/h on the same track. After how many hours does the second train catch up?",
        f"{a} saves ${m * 5} a week. {b} starts with ${n * 10} and saves ${m * 2} a week. After how many weeks do they have the same amount?",
        f"A pizza is cut into {k * 2} slices. {a} eats {k - 1} slices and {b} eats a third of what is left. How many slices remain?",
        f"A square has a perimeter of {w * 4} cm. A rectangle has the same area and a width of {max(2, w // 2)} cm. What is the rectangle's perimeter?",
        f"{n} friends split a bill of ${price * n + m}.{cents:02d} equally and leave a {pct}% tip on top. How much does each friend pay?",
        f"A factory makes {n * 100} {many} a day; {m}% of them are faulty. How many good {many} does it make in {k} weeks of 5 working days?",
        f"{a} bought {m} {many} and {k} {r.choice(ITEMS)[1]} for ${price * m + 3 * k} in all. Each of the second kind cost $3. What did one {one} cost?",
    ]


def math_word(seed: int = 15, draws: int = 60) -> list[dict]:
    """`draws` draws of every template, each with a closing ask drawn from ASKS."""
    r = random.Random(seed)
    rows = []
    for d in range(draws):
        for t, text in enumerate(_problems(r)):
            rows.append(
                {
                    "question_id": f"math_word-{t:02d}-{d:03d}",
                    "category": CATEGORY,
                    "turns": [text + r.choice(ASKS)],
                    "source": "math_word",
                }
            )
    return rows
