"""What one turn's decode produced: its tokens and every raw measurement (bench.decode.loop
fills it).

Both decode loops (bench.decode.loop for our rounds, bench.decode.wholeturn for transformers'
generate()) return a TurnResult; bench.outputs.records turns it into one line of records.jsonl.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class TurnResult:
    output_ids: list[int]
    n_prompt: int
    times_ns: dict  # prefill/draft/verify/other/wall/ttft
    target_forwards: int  # prefill included: AR scores τ = 1
    accept_lengths: list[int] = field(default_factory=list)  # tokens emitted per round
    drafted_per_pos: list[int] = field(default_factory=list)  # rounds that drafted position i
    accepted_per_pos: list[int] = field(default_factory=list)  # rounds that accepted position i
    round_accepted: list[int] = field(default_factory=list)  # accepted drafts per verify round
    round_depth: list[int] = field(default_factory=list)  # drafted depth per verify round
    round_k: list[int] = field(default_factory=list)  # draft size chosen per round (k=auto)
    round_start: list[int] = field(default_factory=list)  # output position at each round's start
    round_steps: list[int] = field(default_factory=list)  # sequential drafter forwards per round
    round_draft_ns: list[int] = field(default_factory=list)  # per round: its draft + observe time
    drafted_tokens: int = 0
    verified_tokens: int = 0  # tokens verified after the root (lookahead's window included)
    accepted_tokens: int = 0
    draft_steps: int = 0  # sequential drafter forwards over the turn (Proposal.steps summed)
    stop: str = "budget"  # what ended the turn: "eos", or "budget" (max_new_tokens reached)
    static_bytes: int = 0  # held by the method before the turn (weights, kept indexes)
    state_bytes: int = 0  # the turn's own drafter state (inside the peak delta already)
    # speed.py's recount of the answer text (bench.outputs.answers)
    recount_tokens: int | None = None

    def add_round(self, proposal, acc, kept: int, start: int) -> None:
        """One verify round: its proposal, its methods.base.Accepted, the tokens it kept (after
        the budget and EOS cut) and the output position it started at."""
        self.target_forwards += 1
        self.verified_tokens += acc.width if acc.width is not None else acc.drafted
        self.round_start.append(start)
        self.round_accepted.append(acc.n_draft_accepted)
        self.round_depth.append(acc.depth)
        self.round_k.append(acc.drafted)
        self.round_steps.append(proposal.steps)
        self.accept_lengths.append(kept)
        self.drafted_tokens += acc.drafted
        self.draft_steps += proposal.steps
        self.accepted_tokens += acc.n_draft_accepted
        bump(self.drafted_per_pos, acc.depth)
        bump(self.accepted_per_pos, acc.n_draft_accepted)


def bump(counts: list[int], upto: int) -> None:
    """counts[i] += 1 for i < upto, growing the list as needed (rounds that reached depth i)."""
    if upto > len(counts):
        counts.extend([0] * (upto - len(counts)))
    for i in range(upto):
        counts[i] += 1


# What the run's warm-up turns say k=auto's costs are (bench.run.runner calibrates with them).


def base_step(turns) -> float | None:
    """s_b: the baseline's seconds per decoded token (after the first) on warm-up TurnResults."""
    decoded = sum(max(len(t.output_ids) - 1, 0) for t in turns)
    if not decoded:
        return None
    return sum((t.times_ns["wall"] - t.times_ns.get("ttft", 0)) / 1e9 for t in turns) / decoded


def step_overhead(step: float | None, curve: dict) -> float:
    """o: what the baseline's step s_b costs beyond c(1)."""
    return max(step - curve[min(curve)], 0.0) if step and curve else 0.0


def step_rounds(times, steps) -> tuple[float, int, float, int]:
    """One turn's per-round drafting times and drafter steps → (time, steps) of its steady rounds
    (after a drafted round), then (time, steps) of its drafted rounds after plain ones (a turn's
    first round excluded), whose time includes the drafter's catch-up on the plain tokens."""
    t = n = late_t = late_n = 0
    for i in range(1, min(len(times), len(steps))):
        if steps[i] and steps[i - 1]:
            t, n = t + times[i], n + steps[i]
        elif steps[i]:
            late_t, late_n = late_t + times[i], late_n + steps[i]
    return t, n, late_t, late_n


def draft_costs(turns) -> tuple[float, float]:
    """(seconds per drafter step, seconds per round outside them) from warm-up TurnResults'
    steady rounds, each round's time over its steps, the median over rounds (one round that
    paid a one-off cost, a page fault storm or a collection, must not set the rate of every
    later one). A learned drafter: its rounds that follow a drafted round (a turn's first
    round, or one after plain rounds, first catches the drafter up on the prompt or the run of
    plain tokens: paid whatever k, and the prompt once per turn, so it is no step's cost); a
    lookup: its rounds. The drafter's prefill (its own span) is left out too. Warm-up turns
    without a steady round (a drafter that drafted only after plain rounds) read those rounds,
    catch-up included: an upper bound of a step, where the turns' totals would charge the
    prompt's catch-up to a few steps and switch the drafter off for good. Turns without
    per-round times (a whole-turn generate()) fall back to their totals."""
    steady, late, lookups = [], [], []
    for t in turns:
        times, steps = t.round_draft_ns, t.round_steps
        if any(steps):
            for i in range(1, min(len(times), len(steps))):
                if steps[i]:
                    (steady if steps[i - 1] else late).append(times[i] / steps[i])
        else:  # a lookup
            lookups += times[: len(steps)]
    for per in (steady, late):
        if per:
            return statistics.median(per) / 1e9, 0.0
    if lookups:
        return 0.0, statistics.median(lookups) / 1e9
    draft = sum(t.times_ns.get("draft", 0) for t in turns) / 1e9
    total_steps = sum(t.draft_steps for t in turns)
    if total_steps:
        return draft / total_steps, 0.0
    return 0.0, draft / max(sum(max(t.target_forwards - 1, 0) for t in turns), 1)
