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

from bench.decode.turn import TurnResult
from bench.decode.wholeturn import generate_whole
from groundfloor.clock import Clock
from groundfloor.sampling import SamplingParams, next_token
from groundfloor.state import DecodeState


def cut(tokens: list[int], budget: int, eos_ids: set[int]) -> tuple[list[int], bool]:
    """A round's tokens within the budget, up to and including the first EOS; whether it hit one."""
    tokens = tokens[:budget]
    for i, t in enumerate(tokens):
        if t in eos_ids:
            return tokens[: i + 1], True
    return tokens, False


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
    state = begin(method, prompt_ids, max_new_tokens, sampling, generator, torch.device(device))
    clock.reset()
    res = TurnResult(output_ids=[], n_prompt=len(prompt_ids), times_ns={}, target_forwards=1)
    with clock.phase("prefill"):
        logits = method.prefill(state)
    with clock.phase("draft"):  # the drafter's own prefill: drafting work, wherever it runs
        method.draft_prefill(state, logits)
    with clock.phase("other"):
        first = next_token(logits, state.sampling, state.generator)
        state.append([first])
        clock.mark("ttft")
    res.accept_lengths.append(1)
    res.stop = "eos" if first in eos_ids else res.stop
    budget = max_new_tokens - 1
    while budget > 0 and res.stop != "eos":
        with clock.phase("draft"):
            proposal = method.draft(state)
        with clock.phase("verify"):
            verified = method.verify(state, proposal)
        with clock.phase("other"):
            acc = method.accept(state, proposal, verified)
            check_cache(method, state, acc)
        with clock.phase("draft"):  # the drafter reads the verify (features, tables, caches)
            method.observe(state, proposal, acc)
            # k=auto: the rates the next round's size reads, and the round's measured seconds
            round_s = clock.latest_s("draft", "verify", "other")
            method.learn(proposal, acc, round_s, clock.latest_s("verify"))
        with clock.phase("other"):
            tokens, eos = cut(acc.tokens, budget, eos_ids)
            res.stop = "eos" if eos else res.stop
            state.append(tokens)
            budget -= len(tokens)
        res.add_round(proposal, acc, len(tokens), state.length - state.n_prompt - len(tokens))
    return end(method, state, res, clock)


def check_cache(method, state, acc) -> None:
    """After accept the target's cache holds the committed tokens but the last, then the round's
    accepted ones: a method that kept more or fewer positions is a bug, caught here."""
    want = state.length + len(acc.tokens) - 1
    if state.cache.length != want:
        raise RuntimeError(
            f"{method.name}: cache holds {state.cache.length} positions after accept, "
            f"expected {want}"
        )


def begin(method, prompt_ids, max_new_tokens, sampling, generator, device) -> DecodeState:
    """The turn's state (its cache sized for the prompt, the tokens and the widest verify), the
    method readied and started: untimed."""
    capacity = len(prompt_ids) + max_new_tokens + method.max_verify_width()
    state = DecodeState.start(
        prompt_ids, capacity, device, sampling, generator, method.target.new_cache(capacity)
    )
    state.max_new = max_new_tokens
    # a k=auto policy no run calibrated plans with a provisional curve; a turn seen before
    # starts from the policy's state when it was first seen (a repeat, as repeat 0 started)
    method.ready(tuple(map(int, prompt_ids)))
    method.start(state)
    return state


def end(method, state, res: TurnResult, clock: Clock) -> TurnResult:
    """The clock read into the turn's result, then the method's finish (untimed: cross-turn
    state, e.g. suffix's response cache), the output and the method's memory."""
    res.times_ns = clock.read()
    spans = clock.durations("draft")  # the drafter's prefill, then per round: draft, observe
    res.round_draft_ns = [spans[1 + 2 * i] + spans[2 + 2 * i] for i in range(len(res.round_k))]
    method.finish(state)
    res.output_ids = state.ids[state.n_prompt : state.length].tolist()
    res.static_bytes, res.state_bytes = method.static_bytes(), method.state_bytes(state)
    return res
