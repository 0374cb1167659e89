"""The decode loop: prefill, then rounds of a method until max_new_tokens or EOS.

The loop owns the stopping rule, the token count and the clock:

    prefill  — method.prefill (target forward over the prompt)
    draft    — method.draft_prefill (the drafter's own prefill: a draft model's, an index)
    other    — first token from the prefill logits (TTFT is read here)
    per round:
      draft  — method.draft   → Proposal (0..k tokens, or a tree)
      verify — method.verify  → one target forward over the proposal
      other  — method.accept  → accepted tokens (+ target cache rollback)
      draft  — method.observe → the drafter reads the verify (features, tables, its cache);
               method.learn → k=auto's rates and the round's measured seconds (methods.auto)
      other  — truncation, EOS check, append
Whatever a method does for its drafter is timed as draft, wherever in the round it runs.
    then method.finish, untimed (the turn's output is final)

Every method, the baseline included, goes through this one function; transformers' own
speculative modes (`hf_pld`, `hf_assisted`: one `generate()` per turn) go through its sibling
`bench.decode.wholeturn`, under the same clock, budget and EOS rule.
"""

from __future__ import annotations

import torch

from bench.decode.turn import TurnResult, bump
from bench.decode.wholeturn import generate_whole
from groundfloor.clock import Clock
from groundfloor.sampling import SamplingParams
from groundfloor.state import DecodeState


@torch.inference_mode()
def generate(
    method,
    prompt_ids: list[int],
    max_new_tokens: int,
    sampling: SamplingParams,
    eos_ids: set[int],
    clock: Clock,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> TurnResult:
    """Generate one turn with `method`; returns the tokens and every measurement of the turn."""
    if getattr(method, "whole_turn", False):  # transformers' generate() decodes the turn
        return generate_whole(
            method, prompt_ids, max_new_tokens, sampling, eos_ids, clock, generator, device
        )
    device = torch.device(device)
    capacity = len(prompt_ids) + max_new_tokens + method.max_verify_width()
    state = DecodeState.start(
        prompt_ids, capacity, device, sampling, generator, method.target.new_cache(capacity)
    )
    state.max_new = max_new_tokens
    method.ready()  # untimed: a k=auto policy no run calibrated plans with a provisional curve
    method.start(state)
    clock.reset()
    res = TurnResult(output_ids=[], n_prompt=len(prompt_ids), times_ns={}, target_forwards=1)

    with clock.phase("prefill"):
        logits = method.prefill(state)
    with clock.phase("draft"):  # the drafter's own prefill: drafting work, wherever it runs
        method.draft_prefill(state, logits)
    with clock.phase("other"):
        first = method.first_token(state, logits)
        state.append([first])
        clock.mark("ttft")
    res.accept_lengths.append(1)
    if first in eos_ids:
        res.stop = "eos"
    budget = max_new_tokens - 1

    while budget > 0 and res.stop != "eos":
        with clock.phase("draft"):
            proposal = method.draft(state)
        with clock.phase("verify"):
            verified = method.verify(state, proposal)
        with clock.phase("other"):
            acc = method.accept(state, proposal, verified)
            if state.cache.length != state.length + len(acc.tokens) - 1:
                raise RuntimeError(
                    f"{method.name}: cache holds {state.cache.length} "
                    f"positions after accept, expected "
                    f"{state.length + len(acc.tokens) - 1}"
                )
        with clock.phase("draft"):  # the drafter reads the verify (features, tables, caches)
            method.observe(state, proposal, acc)
            # k=auto: the rates the next round's size reads, and the round's measured seconds
            method.learn(proposal, acc, clock.latest_s("draft", "verify", "other"))
        with clock.phase("other"):
            tokens = acc.tokens[:budget]
            for i, t in enumerate(tokens):
                if t in eos_ids:
                    tokens = tokens[: i + 1]
                    res.stop = "eos"
                    break
            state.append(tokens)
            budget -= len(tokens)
        res.target_forwards += 1
        res.verified_tokens += acc.width if acc.width is not None else acc.drafted
        res.round_start.append(state.length - state.n_prompt - len(tokens))
        res.round_accepted.append(acc.n_draft_accepted)
        res.round_depth.append(acc.depth)
        res.round_k.append(acc.drafted if proposal.chosen is None else proposal.chosen)
        res.round_steps.append(proposal.steps)
        res.accept_lengths.append(len(tokens))
        res.drafted_tokens += acc.drafted
        res.draft_steps += proposal.steps
        res.accepted_tokens += acc.n_draft_accepted
        bump(res.drafted_per_pos, acc.depth)
        bump(res.accepted_per_pos, acc.n_draft_accepted)

    res.times_ns = clock.read()
    spans = clock.durations("draft")  # the drafter's prefill, then per round: draft, observe
    res.round_draft_ns = [spans[1 + 2 * i] + spans[2 + 2 * i] for i in range(len(res.round_k))]
    method.finish(state)  # untimed: cross-turn state (e.g. suffix's response cache)
    res.output_ids = state.ids[state.n_prompt : state.length].tolist()
    res.static_bytes, res.state_bytes = method.static_bytes(), method.state_bytes(state)
    return res
