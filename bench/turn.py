"""What one turn's decode produced: its tokens and every raw measurement (bench.loop fills it).

Both decode loops (bench.loop for our rounds, bench.wholeturn for transformers' generate())
return a TurnResult; bench.records turns it into one line of records.jsonl.
"""

from __future__ import annotations

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
    stop: str = "length"
    static_bytes: int = 0  # held by the method before the turn (weights, kept indexes)
    state_bytes: int = 0  # the turn's own drafter state (inside the peak delta already)
    recount_tokens: int | None = None  # speed.py's recount of the answer text (bench.answers)


def bump(counts: list[int], upto: int) -> None:
    """counts[i] += 1 for i < upto, growing the list as needed (rounds that reached depth i)."""
    if upto > len(counts):
        counts.extend([0] * (upto - len(counts)))
    for i in range(upto):
        counts[i] += 1
