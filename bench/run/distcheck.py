"""`check=distribution`: a two-sample test, in every T > 0 run, that the method samples the
baseline's distribution.

    python -m bench method=ngram temperature=1 check=distribution

The runner calls `for_run` once, after warm-up and before the timed prompts. On the first turn
of the first prompt of EVERY task in the cell, the baseline (`ar`) and the method each draw
`dist_samples` continuations of `dist_positions` tokens through `bench.decode.loop.generate`,
each continuation from its own seed (the two sides never share a seed, so their samples are
independent), the method's every round drafting (force_drafting: k=auto's plain rounds would
test nothing). For each position j a two-sample chi-square test on the 2 × C table of counts
compares the token y_j, and for j ≥ 2 also the prefix (y_1..y_j), which catches a sampler whose
marginals look right while the tokens depend on each other wrongly (argmax after a sampled first
token). Categories too rare for every expected count to reach 5 are pooled into one bin; a
continuation that stopped at EOS shows the token END at later positions. A task's p-value is
Bonferroni's min(1, m · min_i p_i) over its m = 2J − 1 tests (more with the forced-rejection
draws), reported only when the method drafted at least `drafting_floor(dist_samples)` tokens
in its draws, else the task is "untested". The cell's p-value combines the tested tasks
(Bonferroni over them); none tested: "untested". It is written only on the records it sampled
(each task's first prompt, turn 0: `dist_pvalue`, `dist_status`), so a category or task the
check never drew carries none; the evidence per task — each test's p-value and bins, token
counts per position, what the method drafted and accepted — goes to distcheck.json. A small
p-value says the method's outputs are distributed differently from the baseline's: a sampling
bug, whatever the speedup. docs/sampling.md has the details, the test's power and the floor.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field

import torch

from bench.decode.loop import generate
from groundfloor.errors import UserError
from groundfloor.prompting import encode, seed_for
from groundfloor.stats import bonferroni, two_sample_pvalue

END = -1  # the "token" at positions after an EOS
# A task's p-value is reported only when the method drafted at least this many tokens per
# continuation on average (drafting_floor; docs/sampling.md derives it from the test's power):
# below it, most of the sampled tokens never went through the accept rule, and a large p-value
# would read as evidence about a rule the check barely exercised.
MIN_DRAFTED_PER_SAMPLE = 0.5


class ForcedRejection:
    """`method` with every round's depth-1 draft tokens replaced by the target's least likely
    token (probability ~0: the round rejects it and resamples), so every position after the
    first comes after a rejection and its rollback, in rounds 1, 2, 3, ... The drafter keeps
    its own state; the replaced tokens are proposed as point masses, so the accept rule stays
    exact and the law of the output is the baseline's."""

    def __init__(self, method):
        self.inner = method

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def draft(self, state):
        proposal = self.inner.draft(state)
        if proposal.tokens.numel() == 0:
            return proposal
        ctx = state.tokens[None]  # a fresh forward: the method's caches stay untouched
        logits = self.inner.target.forward(ctx, self.inner.target.new_cache(ctx.shape[1]))
        bad = int(logits.logits[0, -1].argmin())
        n, layout = proposal.tokens.numel(), getattr(proposal, "layout", None)
        if layout is None:  # a chain: its first token
            first = torch.arange(n, device=proposal.tokens.device) == 0
        else:  # a tree: every depth-1 node of the draft (lookahead's window stays)
            first = torch.tensor(
                [i < proposal.n_draft and layout.parents[i] < 0 for i in range(n)],
                device=proposal.tokens.device,
            )
        proposal.tokens = torch.where(first, bad, proposal.tokens)
        if proposal.q is not None:  # a point mass on `bad` where replaced
            q = proposal.q.clone()
            q[first[: q.shape[0]]] = 0
            q[first[: q.shape[0]], bad] = 1
            proposal.q = q
        return proposal


def continuations(
    method,
    ids: list[int],
    role: str,
    prompt_id: str,
    *,
    samples: int,
    positions: int,
    seed: int,
    sampling,
    eos: set[int],
    clock,
    device,
) -> tuple[list, dict]:
    """`samples` continuations of `positions` tokens, padded with END after an EOS; each draw has
    its own seed, and the two roles never share one."""
    out, drafted, accepted = [], 0, 0
    for s in range(samples):
        gen = torch.Generator(device=device)
        gen.manual_seed(seed_for(seed, f"{prompt_id}/distcheck/{role}", s))
        res = generate(method, ids, positions, sampling, eos, clock, gen, device)
        out.append(res.output_ids + [END] * (positions - len(res.output_ids)))
        drafted += res.drafted_tokens
        accepted += res.accepted_tokens
    return out, {"drafted_tokens": drafted, "accepted_tokens": accepted}


def position_tests(base: list, meth: list, positions: int, label: str) -> list[dict]:
    """Per position j: the token y_j and, for j ≥ 2, the prefix (y_1..y_j), baseline against
    method (two_sample_pvalue)."""
    tests = []
    for j in range(positions):
        p, bins = two_sample_pvalue([s[j] for s in base], [s[j] for s in meth])
        tests.append({"test": f"{label}token {j + 1}", "pvalue": p, "bins": bins})
        if j:
            p, bins = two_sample_pvalue(
                [tuple(s[: j + 1]) for s in base], [tuple(s[: j + 1]) for s in meth]
            )
            tests.append({"test": f"{label}prefix 1..{j + 1}", "pvalue": p, "bins": bins})
    return tests


def check_prompt(
    baseline,
    method,
    ids: list[int],
    prompt_id: str,
    *,
    samples: int,
    positions: int,
    seed: int,
    sampling,
    eos: set[int],
    clock,
    device,
    forced: bool = True,
) -> dict:
    """Draw both sides on the prompt `ids`, test each position (and, with `forced`, each
    position after forced rejections) → the prompt's evidence, its Bonferroni p-value as
    `dist_pvalue` (whether the method drafted enough for it to mean anything is for_run's)."""
    if samples < 2 or positions < 1:
        raise UserError(
            f"dist_samples={samples}, dist_positions={positions}: "
            "check=distribution needs dist_samples >= 2 and dist_positions >= 1"
        )
    draw = dict(
        samples=samples,
        positions=positions,
        seed=seed,
        sampling=sampling,
        eos=eos,
        clock=clock,
        device=device,
    )
    base, _ = continuations(baseline, ids, "baseline", prompt_id, **draw)
    meth, stats = continuations(method, ids, "method", prompt_id, **draw)
    tests = position_tests(base, meth, positions, "")
    if forced and not getattr(method, "whole_turn", False):  # generate() cannot be forced
        # every round rejecting its draft: positions 2.. come after rollbacks, rounds 1, 2, ...
        more = dict(draw, positions=positions + 1)
        fb, _ = continuations(baseline, ids, "baseline-forced", prompt_id, **more)
        fm, _ = continuations(ForcedRejection(method), ids, "method-forced", prompt_id, **more)
        tests += position_tests(fb, fm, positions + 1, "after forced rejections: ")
    return {
        "prompt_id": prompt_id,
        "turn": 0,
        "prompt_tokens": len(ids),
        "dist_pvalue": bonferroni([t["pvalue"] for t in tests]),
        "tests": tests,
        **stats,
        "counts_per_position": counts_per_position(base, meth, positions),
    }


def counts_per_position(base: list, meth: list, positions: int) -> list[dict]:
    """[{role: {token: count}} for each position j], most common first (distcheck.json)."""
    return [
        {
            role: {str(t): c for t, c in Counter(s[j] for s in side).most_common()}
            for role, side in (("baseline", base), ("method", meth))
        }
        for j in range(positions)
    ]


def drafting_floor(samples: int) -> int:
    """The fewest drafted tokens (method side, all `samples` continuations together) for a
    task's p-value to be reported: MIN_DRAFTED_PER_SAMPLE per continuation, rounded up."""
    return math.ceil(MIN_DRAFTED_PER_SAMPLE * samples)


@dataclass(frozen=True)
class DistCheck:
    """check=distribution's result for a cell. Per task (`tasks[task]`: pvalue, status,
    drafted, prompt_id): "tested" with the task's p-value when the method drafted at least
    `floor` tokens in its draws, else "untested" and pvalue None. The cell's `pvalue` is
    Bonferroni's min(1, m · min p) over the m tested tasks; `status` is "untested" (and
    pvalue None) when no task was tested; `drafted` sums every task's drafted tokens."""

    pvalue: float | None
    status: str  # "tested" | "untested"
    drafted: int
    floor: int
    tasks: dict[str, dict] = field(default_factory=dict)

    def stamp(self, task: str, prompt_id: str) -> dict | None:
        """The record fields of the unit this check sampled (the task's first prompt, turn 0):
        {dist_pvalue, dist_status}; None for every prompt it did not sample."""
        t = self.tasks.get(task)
        if t is None or t["prompt_id"] != prompt_id:
            return None
        return {"dist_pvalue": t["pvalue"], "dist_status": t["status"]}


def combine(tasks: dict[str, dict], floor: int) -> DistCheck:
    """The cell's result from its tasks' (see DistCheck)."""
    tested = [t["pvalue"] for t in tasks.values() if t["status"] == "tested"]
    return DistCheck(
        pvalue=bonferroni(tested) if tested else None,
        status="tested" if tested else "untested",
        drafted=sum(t["drafted"] for t in tasks.values()),
        floor=floor,
        tasks=tasks,
    )


def first_of_each_task(prompts: list) -> list:
    """The first prompt of every task, in the cell's order."""
    seen: dict[str, object] = {}
    for p in prompts:
        seen.setdefault(p.task, p)
    return list(seen.values())


def for_run(cfg, prompts, tokenizer, baseline, method, out_dir, **kw) -> DistCheck:
    """check=distribution for a cell: both sides drawn on the first turn of the first prompt
    of every task, the method's every round drafting (force_drafting: k=auto would otherwise
    choose plain rounds, and a check that drafts nothing tests nothing), with the run's
    dist_samples, dist_positions and seed; kw: sampling, eos, clock, device. Writes
    distcheck.json (the evidence per task) → DistCheck."""
    samples, positions = int(cfg.dist_samples), int(cfg.dist_positions)
    floor = drafting_floor(samples)
    evidence, tasks = {}, {}
    method.force_drafting(True)
    try:
        for prompt in first_of_each_task(prompts):
            msgs = [{"role": "user", "content": prompt.turns[0]}]
            ids = encode(tokenizer, msgs, bool(cfg.model.chat_template))
            ev = check_prompt(
                baseline,
                method,
                ids,
                prompt.id,
                samples=samples,
                positions=positions,
                seed=int(cfg.seed),
                forced=bool(cfg.dist_forced),
                **kw,
            )
            evidence[prompt.task] = ev
            tasks[prompt.task] = task_entry(ev, floor)
    finally:
        method.force_drafting(False)
    result = combine(tasks, floor)
    sampling = kw["sampling"]
    head = {
        "method": method.name,
        "baseline": baseline.name,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "samples": samples,
        "positions": positions,
    }
    write_evidence(out_dir, head, result, evidence)
    return result


def task_entry(ev: dict, floor: int) -> dict:
    """A task's DistCheck entry from its prompt's evidence (whose `status` it sets): tested
    with the prompt's p-value when the method drafted at least `floor` tokens."""
    tested = ev["drafted_tokens"] >= floor
    ev["status"] = "tested" if tested else "untested"
    return {
        "pvalue": ev["dist_pvalue"] if tested else None,
        "status": ev["status"],
        "drafted": ev["drafted_tokens"],
        "prompt_id": ev["prompt_id"],
    }


def write_evidence(out_dir, head: dict, result: DistCheck, evidence: dict) -> None:
    """distcheck.json: the check's settings (`head`), the cell's result and each task's
    evidence."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        **head,
        "forced_drafting": True,
        "floor": result.floor,
        "status": result.status,
        "dist_pvalue": result.pvalue,
        "drafted_tokens": result.drafted,
        "accepted_tokens": sum(e["accepted_tokens"] for e in evidence.values()),
        "tasks": evidence,
    }
    (out_dir / "distcheck.json").write_text(json.dumps(doc, indent=1))
