"""Several conversations decoded together: B slots, continuous batching, one target forward a
round for all of them.

    batch = Batch(engine, make_method, B)      # B slots, each its own method on a seat
    out = batch.run(conversations, turn_ids, max_new, sampling, eos)

Each slot is a thread that takes the next conversation in prompt order, decodes its turns with
`bench.decode.loop.generate` and its own method instance (its own drafter state, caches and
k=auto policy), and takes the next conversation when it is done, as continuous batching does.
The slots' target forwards meet (engines.shared): every round is one forward over all the
slots' rows (plain and drafted rows, each sequence's own tree or chain mask, nothing attending
across sequences), and each sequence gets the bits its own forward gives, so every
sequence's tokens are its B = 1 tokens. The slots run one at a time between forwards, so
drafting never overlaps and a run is deterministic.

With one slot the plain loop runs in the caller's thread on the engine itself (the batch-1
run, unchanged). With more, the slots are engines.shared's threads, each drafting on one core
(the shared forward runs on all of them in the caller's thread).

Each turn's TurnResult is timed by its slot's own clock: its wall time is the sequence's
latency in the batch (the forwards it shared, the other slots' drafting it waited for), so its
time per output token is the per-sequence TPOT under load. The batch's time is the time during
which some sequence was inside its turn's clock (the union of the turns' clocked intervals on
the host's time line: at B = 1, Σ of the turns' wall, the batch-1 cell's definition; the
untimed work before a turn's prefill and after its last token, when no other sequence is in
a turn, counts on neither side); with its new tokens it gives the aggregate throughput. The
draft/verify split of a slot's clock includes the others' work and is not a per-method figure
at B > 1.

Budgets: `max_new` is one count for every conversation or a list, one per conversation (the
cell's per-prompt budgets, as at B = 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bench.decode.loop import generate
from engines.shared import SharedForward
from groundfloor.clock import Clock


@dataclass
class BatchRun:
    turns: dict = field(default_factory=dict)  # (conversation index, turn) → TurnResult
    ids: dict = field(default_factory=dict)  # (conversation index, turn) → its prompt ids
    wall_s: float = 0.0  # time some sequence was inside its turn's clock (the module's doc)
    forwards: int = 0  # shared target forwards
    rows: int = 0  # rows they held (prefill tokens included)
    merged: int = 0  # shared forwards that held several sequences
    static_bytes: int = 0  # what the slots' methods hold (each slot its own drafter)
    slot_of: dict = field(default_factory=dict)  # conversation index → the slot that ran it

    @property
    def new_tokens(self) -> int:
        return sum(len(t.output_ids) for t in self.turns.values())

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s else 0.0


class Batch:
    def __init__(self, engine, make_method, size: int, device="cpu"):
        """make_method(target) → a method decoding on `target` (one per slot, each with its own
        state); size: B, the slots."""
        if size < 1:
            raise ValueError(f"batch={size} is not valid; use an integer >= 1")
        self.shared = SharedForward(engine, slots=())
        self.seats = [self.shared.seat(b) for b in range(size)]
        self.methods = [make_method(engine if size == 1 else seat) for seat in self.seats]
        self.size, self.device = size, torch.device(device)

    def _alone(self, queue, turn_ids, budgets, sampling, eos, generator) -> BatchRun:
        run, clock, spans = BatchRun(), Clock(self.device), []
        for i, conv in queue:
            run.slot_of[i], outputs = 0, []
            while (ids := turn_ids(conv, len(outputs), outputs)) is not None:
                res = generate(self.methods[0], ids, budgets[i], sampling, eos, clock, generator,
                               self.device)  # fmt: skip
                spans.append(clock.host_interval())
                run.turns[(i, len(outputs))], run.ids[(i, len(outputs))] = res, ids
                outputs.append(res.output_ids)
                run.forwards += res.target_forwards
                run.rows += len(ids) + res.verified_tokens + res.target_forwards - 1
        run.wall_s = covered_s(spans)
        run.static_bytes = self.methods[0].static_bytes()
        return run

    def run(self, conversations: list, turn_ids, max_new, sampling, eos, generator=None):
        """Decode every conversation: turn_ids(conversation, turn, earlier outputs) → the
        turn's prompt ids, or None after its last turn; max_new: a budget per turn, one for all
        or a list with one per conversation. → BatchRun."""
        queue, run = list(enumerate(conversations)), BatchRun()
        budgets = list(max_new) if isinstance(max_new, list | tuple) else [max_new] * len(queue)
        if len(budgets) != len(queue):
            raise ValueError(f"{len(budgets)} budgets for {len(queue)} conversations")
        if self.size == 1:  # one slot: the plain loop in this thread, the engine unshared
            return self._alone(queue, turn_ids, budgets, sampling, eos, generator)
        clocks = [Clock(self.device) for _ in range(self.size)]
        spans = []  # every turn's clocked interval (list.append: safe across the slots' threads)

        def work(b: int, item) -> None:
            i, conv = item
            run.slot_of[i], outputs = b, []
            while (ids := turn_ids(conv, len(outputs), outputs)) is not None:
                res = generate(self.methods[b], ids, budgets[i], sampling, eos, clocks[b],
                               generator, self.device)  # fmt: skip
                spans.append(clocks[b].host_interval())
                run.turns[(i, len(outputs))], run.ids[(i, len(outputs))] = res, ids
                outputs.append(res.output_ids)

        self.shared.map(work, queue, self.size)
        run.wall_s = covered_s(spans)
        shared = self.shared
        run.forwards, run.rows, run.merged = shared.forwards, shared.rows, shared.merged
        run.static_bytes = sum(m.static_bytes() for m in self.methods)
        return run


def covered_s(spans: list[tuple[int, int]]) -> float:
    """Seconds of the host's time line inside at least one of `spans` ((start, end) ns):
    sorted by start, each span adds what lies past the furthest end so far."""
    total, reach = 0, None
    for a, b in sorted(s for s in spans if s is not None):  # None: a turn with no timed span
        if reach is None or a >= reach:
            total, reach = total + b - a, b
        elif b > reach:
            total, reach = total + b - reach, b
    return total / 1e9
