"""The load a pass puts on a server: conversations at a concurrency or a request rate, bounded.

    concurrency     at most this many conversations in flight (closed loop when request_rate
                    is null: a finished conversation makes room for the next at once)
    request_rate    conversations started per second, Poisson arrivals (seeded), still capped by
                    `concurrency`; null: all at once (the cap alone paces them)
    num_requests    conversations per pass; the prompts cycle when it exceeds them
    max_time_s      no conversation starts after this many seconds of the pass; those never
                    started are counted as `not_started`, not dropped silently

A conversation sends its turns in order, turn 2 after turn 1's answer (as in-process runs).
A failed turn ends its conversation; its failure is kept as a record (`error`).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from bench.serve.client import Reply


@dataclass
class Turn:
    """One request of a conversation, as sent and as answered."""

    conv: int  # position in the pass (the n-th conversation started)
    prompt: object  # tasks.loader.Prompt
    turn: int
    messages: list[dict]
    reply: Reply


@dataclass
class PassResult:
    turns: list[Turn] = field(default_factory=list)
    started: int = 0
    not_started: int = 0
    wall_s: float = 0.0  # first send → last reply


def arrivals(n: int, rate: float | None, seed: int) -> list[float]:
    """Start offsets (s) of n conversations: Poisson at `rate`, or all at 0."""
    if not rate:
        return [0.0] * n
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def _conversation(i: int, prompt, send, result, lock, slots) -> None:
    """Conversation i's turns in order, each reply recorded as it comes (a failed turn ends the
    conversation); its concurrency slot freed at the end."""
    try:
        messages: list[dict] = []
        for t, text in enumerate(prompt.turns):
            messages.append({"role": "user", "content": text})
            reply = send(prompt, t, list(messages))
            with lock:
                result.turns.append(Turn(i, prompt, t, list(messages), reply))
            if reply.error:
                break
            messages.append({"role": "assistant", "content": reply.text})
    finally:
        slots.release()


def run_pass(
    prompts: list,
    send,
    concurrency: int,
    rate: float | None,
    num_requests: int,
    max_time_s: float,
    seed: int,
) -> PassResult:
    """Send `num_requests` conversations (prompts cycled) through `send(prompt, turn, messages)
    → Reply`; returns every turn's reply in start order."""
    plan = [prompts[i % len(prompts)] for i in range(num_requests)]
    offsets = arrivals(len(plan), rate, seed)
    slots = threading.Semaphore(concurrency)
    lock = threading.Lock()
    result = PassResult()
    threads = []
    t0 = time.perf_counter()

    deadline = t0 + max_time_s
    for i, (prompt, offset) in enumerate(zip(plan, offsets)):
        wait = min(t0 + offset, deadline) - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        left = deadline - time.perf_counter()
        if left <= 0 or not slots.acquire(timeout=left):  # no start past the deadline
            result.not_started = len(plan) - i
            break
        args = (i, prompt, send, result, lock, slots)
        th = threading.Thread(target=_conversation, args=args, daemon=True)
        th.start()
        threads.append(th)
        result.started += 1
    for th in threads:
        th.join()
    sends = [tr.reply.sent for tr in result.turns if tr.reply.sent]
    ends = [tr.reply.end for tr in result.turns if tr.reply.end]
    result.wall_s = (max(ends) - min(sends)) if sends and ends else 0.0
    result.turns.sort(key=lambda tr: (tr.conv, tr.turn))
    return result
