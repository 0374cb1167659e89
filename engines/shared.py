"""One target shared by several sequences, each decoded by its own thread: their forwards meet.

    shared = SharedForward(engine)
    methods = [make_method(shared.seat(b)) for b in range(B)]   # seat b: slot b's engine
    shared.map(work, items, B)      # work(b, item) in B threads, every item in order

Each seat is the engine for its sequence (every attribute but `forward` is the engine's own).
A seat's forward waits until every seated thread has asked for one, then one
`engine.forward_seqs` runs them all: on the lean engine's one-call forward every product reads
its weights once for all the sequences' rows, and each sequence gets the bits its own forward
gives (engines/kernels/model.h), so batching changes no token. An engine without forward_seqs
runs the requests one after another.

The seats' threads run one at a time, the lowest first (a baton passed at each forward and when
a seat leaves), and the shared forward runs in the thread that calls `serve()`: a sequence's
drafting never overlaps another's, and a run is deterministic.
"""

from __future__ import annotations

import threading

import torch

from engines.base import Out

SERVER = -1  # the baton's holder while the shared forward runs (SharedForward.serve)


class Seat:
    """The engine as one sequence's thread sees it: its forwards go through SharedForward."""

    def __init__(self, shared: SharedForward, slot: int):
        self._shared, self._slot = shared, slot

    def __getattr__(self, name):  # everything but forward is the engine's
        return getattr(self._shared.engine, name)

    @property
    def unshared(self):
        """The engine itself: what a timing probe (engines.probe) times and keys its curve by.
        A seat's forward outside SharedForward.map waits for a round that never comes."""
        return self._shared.engine

    def __enter__(self):
        self._shared.enter(self._slot)
        return self

    def __exit__(self, *exc):
        self._shared.leave(self._slot)

    def others_rows(self) -> int:
        """Rows the other seats put in the coming shared forward (SharedForward.others_rows)."""
        return self._shared.others_rows(self._slot)

    def forward(
        self, ids, cache, positions=None, mask=None, logits_to_keep: int = 0, hidden=()
    ) -> Out:
        if ids.shape[0] != 1:
            raise ValueError("a seat decodes one sequence: ids (1, n)")
        return self._shared.forward(
            self._slot, (ids[0], cache, positions, mask, int(logits_to_keep), tuple(hidden))
        )


class SharedForward:
    def __init__(self, engine, slots=()):
        self.engine = engine
        self.cv = threading.Condition()
        self.open(slots)

    def open(self, slots) -> None:
        """A new run: `slots` the seats that will decode (each thread enters its seat, and
        leaves it when it has nothing more to decode); the lowest runs first."""
        self.live: set[int] = set(slots)  # seats whose thread is (or will be) decoding
        self.asked: dict[int, tuple] = {}  # seat → its forward's arguments, waiting
        self.done: dict[int, object] = {}  # seat → its forward's Out (or the error it raised)
        self.running: int | None = min(self.live) if self.live else None  # who may run now
        self.forwards = self.rows = 0  # shared forwards run, and the rows they held
        self.merged = 0  # of them, those that held several sequences
        self.asked_rows = 0  # the rows of the forwards waiting in `asked`

    def seat(self, slot: int) -> Seat:
        return Seat(self, slot)

    def map(self, work, items: list, size: int) -> None:
        """work(slot, item) for every item, over `size` seats: each a thread taking the next
        item in order when it finishes one (continuous batching), with its seat as its engine
        (self.seat(b)); the shared forwards run in this thread. Each seat's thread uses one
        thread of its own for its other work (OpenMP work started from several threads
        competed for the cores: 2.4× slower here). Raises the first error a seat raised."""
        queue, lock, errors = list(items), threading.Lock(), []
        slots = range(min(size, len(queue)))
        self.open(slots)

        def seat(b: int) -> None:
            try:
                with Seat(self, b):
                    torch.set_num_threads(1)
                    while True:
                        with lock:
                            if not queue:
                                return
                            item = queue.pop(0)
                        work(b, item)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(e)

        threads = [threading.Thread(target=seat, args=(b,), daemon=True) for b in slots]
        for t in threads:
            t.start()
        self.serve()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def enter(self, slot: int) -> None:
        """slot's thread starts decoding: it runs when the baton reaches it."""
        with self.cv:
            if slot not in self.live:
                raise ValueError(f"seat {slot} was not among the slots")
            self.cv.wait_for(lambda: self.running == slot)

    def leave(self, slot: int) -> None:
        """slot's thread is done (or failed): the baton moves on without it."""
        with self.cv:
            self.live.discard(slot)
            gone = self.asked.pop(slot, None)
            self.asked_rows -= 0 if gone is None else int(gone[0].numel())
            self._pass()

    def others_rows(self, slot: int) -> int:
        """The rows the seats other than `slot` put in the coming shared forward: those they
        asked for, and one for each live seat that has not asked yet (a plain round, until it
        drafts). Read by the seat holding the baton, while no other thread changes them."""
        mine = slot in self.live and slot not in self.asked
        return self.asked_rows + len(self.live) - len(self.asked) - mine

    def forward(self, slot: int, args: tuple) -> Out:
        with self.cv:
            self.asked[slot] = args
            self.asked_rows += int(args[0].numel())
            self._pass()
            self.cv.wait_for(lambda: self.running == slot)
            out = self.done.pop(slot)
        if isinstance(out, BaseException):
            raise out
        return out

    def _pass(self) -> None:
        """Give the baton to the lowest seat still drafting; when every live seat waits on a
        forward, to the serving thread, which runs them all as one. (Holding the lock.)"""
        ready = sorted(self.live - set(self.asked))
        self.running = ready[0] if ready else SERVER if self.asked else None
        self.cv.notify_all()

    def serve(self) -> None:
        """The shared forwards, run in the calling thread (the one that made the engine's
        threads' pools: OpenMP work started from another thread ran 2.4× slower here) until
        every seat has left; after each, the baton goes to the lowest seat."""
        with self.cv:
            while True:
                self.cv.wait_for(lambda: self.running == SERVER or not self.live)
                if not self.live:
                    return
                self._run()
                self.running = min(self.live)
                self.cv.notify_all()

    def _run(self) -> None:
        slots = sorted(self.asked)
        args = [self.asked.pop(s) for s in slots]
        self.asked_rows = 0
        self.forwards += 1
        self.merged += len(args) > 1
        self.rows += sum(int(a[0].numel()) for a in args)
        try:
            with torch.inference_mode():  # as the decode loops that asked
                outs = self._forward(args)
        except Exception as e:  # every waiting seat raises it
            outs = [e] * len(slots)
        self.done.update(zip(slots, outs))

    def _forward(self, args: list[tuple]) -> list[Out]:
        seqs = getattr(self.engine, "forward_seqs", None)
        if seqs is None or len(args) == 1:
            return [
                self.engine.forward(ids[None], cache, pos, mask, keep, hidden)
                for ids, cache, pos, mask, keep, hidden in args
            ]
        hidden = sorted({h for a in args for h in a[5]})
        outs = seqs(
            [a[0] for a in args],
            [a[1] for a in args],
            [None if a[2] is None else a[2][0] for a in args],
            [None if a[3] is None else a[3][0] for a in args],
            [a[4] for a in args],
            hidden,
        )
        return [Out(o.logits, {h: o.hidden[h] for h in a[5]}) for o, a in zip(outs, args)]
