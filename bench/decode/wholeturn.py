"""The decode loop for methods whose round lives inside transformers' `generate()`.

`hf_pld` and `hf_assisted` are transformers' own speculative modes, run as transformers ships
them, so one call to `generate()` decodes the whole turn. The harness still owns what it owns
for every other method:

    stopping — it passes `max_new_tokens` and the EOS ids, then checks the output against them
               (a turn longer than the budget, or running past an EOS, is an error, not trimmed)
    clock    — forward hooks switch the same Clock's phases: the target's first forward is
               `prefill`, its later ones `verify`, the assistant's forwards `draft`, and the time
               in between (candidate selection, prompt lookup, acceptance, cache cropping) is
               `other`; TTFT is read when the first new tokens reach the streamer
    counts   — one round per target forward; the streamer receives each round's accepted tokens
               (accepted drafts + the target's own token), the pre-hook sees each forward's
               width (drafted = width − 1; the first forward also carries the prompt)

So τ, α per position, phases and the greedy verdict mean here what they mean for `ngram`.
"""

from __future__ import annotations

import torch

from bench.decode.turn import TurnResult, bump
from groundfloor.clock import Clock
from groundfloor.sampling import SamplingParams


class RoundStreamer:
    """transformers' streamer protocol: `put` gets the prompt once, then each round's tokens."""

    def __init__(self, clock: Clock):
        self.clock, self.puts, self.rounds = clock, 0, []

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 1:  # generate() echoes the prompt first
            return
        if not self.rounds:
            self.clock.mark("ttft")
        self.rounds.append(value.reshape(-1).tolist())

    def end(self) -> None:
        pass


def _ids_of(args, kwargs) -> torch.Tensor | None:
    ids = kwargs.get("input_ids")
    if ids is None and args:
        ids = args[0]
    return ids


@torch.inference_mode()
def generate_whole(
    method,
    prompt_ids: list[int],
    max_new_tokens: int,
    sampling: SamplingParams,
    eos_ids: set[int],
    clock: Clock,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> TurnResult:
    """One turn of a whole-turn method (`method.whole_turn`); returns what `loop.generate` does."""
    target = method.target.model
    assistant = method.assistant()
    widths: list[int] = []
    state = {"forwards": 0}

    def target_pre(_mod, args, kwargs):
        ids = _ids_of(args, kwargs)
        widths.append(int(ids.shape[1]) if ids is not None else 0)
        clock.switch("prefill" if state["forwards"] == 0 else "verify")
        state["forwards"] += 1

    def back_to_other(*_):
        clock.switch("other")

    def draft_pre(*_):
        clock.switch("draft")

    hooks = [
        target.register_forward_pre_hook(target_pre, with_kwargs=True),
        target.register_forward_hook(back_to_other),
    ]
    if assistant is not None:
        hooks += [
            assistant.register_forward_pre_hook(draft_pre),
            assistant.register_forward_hook(back_to_other),
        ]
    streamer = RoundStreamer(clock)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    kw = dict(
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        streamer=streamer,
        eos_token_id=sorted(eos_ids) or None,
        pad_token_id=min(eos_ids, default=0),
        do_sample=not sampling.greedy,
        use_cache=True,
    )
    if not sampling.greedy:  # generate() samples from the global RNG: seed it from ours
        dev = generator.device if generator is not None else "cpu"  # a CUDA run's is on the GPU
        torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator, device=dev)))
        kw.update(
            temperature=sampling.temperature, top_k=sampling.top_k or None, top_p=sampling.top_p
        )
    kw.update(method.generate_kwargs())
    clock.reset()
    try:
        clock.switch("other")
        out = target.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        clock.switch(None)
    finally:
        for h in hooks:
            h.remove()
    output = out[0, len(prompt_ids) :].tolist()
    _check_stopping(method.name, output, streamer.rounds, max_new_tokens, eos_ids)

    res = TurnResult(
        output_ids=output,
        n_prompt=len(prompt_ids),
        times_ns=clock.read(),
        target_forwards=state["forwards"],
    )
    res.stop = "eos" if output and output[-1] in eos_ids else "budget"
    for i, toks in enumerate(streamer.rounds):
        drafted = widths[i] - (len(prompt_ids) if i == 0 else 1) if i < len(widths) else 0
        accepted = len(toks) - 1
        res.accept_lengths.append(len(toks))
        res.drafted_tokens += drafted
        res.accepted_tokens += accepted
        bump(res.drafted_per_pos, drafted)
        bump(res.accepted_per_pos, accepted)
    res.static_bytes = method.static_bytes()
    return res


def _check_stopping(
    name: str, output: list[int], rounds: list[list[int]], max_new: int, eos_ids: set[int]
) -> None:
    """The harness's stopping rule, checked rather than assumed of generate()."""
    if len(output) > max_new:
        raise RuntimeError(f"{name}: generate() returned {len(output)} tokens, budget {max_new}")
    for i, t in enumerate(output[:-1]):
        if t in eos_ids:
            raise RuntimeError(f"{name}: generate() went on past EOS at position {i}")
    if [t for r in rounds for t in r] != output:
        raise RuntimeError(f"{name}: the streamed rounds do not add up to the returned tokens")
