"""The one clock: wall time split into phases (prefill, draft, verify, other).

On CUDA each phase is bracketed by CUDA events and read after one synchronize at the end (the
events are allocated once and reused turn after turn, so a round allocates nothing); on
the CPU by `time.perf_counter_ns`. Work is synchronous there, so no fence is needed. A method never
touches the clock: the decode loop wraps its calls. `read` also gives `host_wall`, the host's
clock from the first span's start to the read (after the synchronize): on CUDA the check that
the events time what the host waits for (bench.tools.gpu_check); on the CPU the same clock as
`wall`.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager

import torch

PHASES = ("prefill", "draft", "verify", "other")


def settle_heap() -> None:
    """Collect, then freeze every object alive now (the engine, the drafter, their tables and
    the libraries) out of the garbage collector's scans. Without it a collection that a round's
    few hundred small objects trigger walks the whole heap of torch and transformers: time that
    is the interpreter's, not the method's, and lands on whichever side allocates more (EAGLE
    drafting every round measured 0.97-0.98x without, 1.04-1.06x with, on Zen 4). Serving engines
    freeze their heap after start-up for the same reason. Called once a run's models are built,
    before warm-up, so that warm-up, the cost curve and the turns all run in the same regime;
    objects made later are still collected as usual. Earlier freezes are undone first, so a
    sweep's earlier cells' garbage is still reclaimed."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class Clock:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._events: list = []  # CUDA events, reused from one reset to the next
        self.reset()

    def reset(self) -> None:
        self._spans: list[tuple[str, object, object]] = []
        self._marks: dict[str, object] = {}
        self._open: tuple[str, object] | None = None
        self._used = 0
        self._host0: int | None = None  # the host's clock at the first span's start
        self._host1: int | None = None  # the host's clock at the last read

    def _now(self):
        if self._host0 is None:
            self._host0 = time.perf_counter_ns()
        if self.cuda:
            if self._used == len(self._events):
                self._events.append(torch.cuda.Event(enable_timing=True))
            ev = self._events[self._used]
            self._used += 1
            ev.record()
            return ev
        return time.perf_counter_ns()

    @contextmanager
    def phase(self, name: str):
        start = self._now()
        try:
            yield
        finally:
            self._spans.append((name, start, self._now()))

    def switch(self, name: str | None) -> None:
        """End the open span (if any) and open one named `name` (None: open none). For code
        that cannot bracket a phase with `with`: forward hooks inside transformers' generate()."""
        now = self._now()
        if self._open is not None:
            self._spans.append((self._open[0], self._open[1], now))
        self._open = (name, now) if name is not None else None

    def mark(self, name: str) -> None:
        """A point in time (e.g. first token emitted), read relative to the first span."""
        self._marks[name] = self._now()

    def _ns(self, a, b) -> int:
        if self.cuda:
            return int(a.elapsed_time(b) * 1e6)
        return b - a

    def latest_s(self, *names: str) -> float | None:
        """Seconds of the most recent span of each of `names`, summed, while the clock runs:
        what the decode loop hands k=auto after each round, a control signal, never a reported
        figure. None on CUDA, whose events are read once at the end (reading them every round
        would synchronize the device), and where a phase has no span yet."""
        if self.cuda:
            return None
        total = 0
        for want in names:
            span = next(((a, b) for n, a, b in reversed(self._spans) if n == want), None)
            if span is None:
                return None
            total += span[1] - span[0]
        return total / 1e9

    def durations(self, name: str) -> list[int]:
        """Each span of phase `name`, in order, in nanoseconds (after `read`: on CUDA its
        synchronize makes the events readable)."""
        return [self._ns(a, b) for n, a, b in self._spans if n == name]

    def host_interval(self) -> tuple[int, int] | None:
        """Where the timed turn lies on the host's time line, in perf_counter nanoseconds
        (several slots' turns overlap there, bench.decode.batch): on the CPU the first span's
        start and the last one's end, exactly `wall`; on CUDA the host's clock at the first
        span's start and at the last `read`. None before a span and a read."""
        if self._host0 is None or self._host1 is None or not self._spans:
            return None
        if self.cuda:
            return self._host0, self._host1
        return self._spans[0][1], self._spans[-1][2]

    def read(self) -> dict[str, int]:
        """Totals per phase plus `wall` (first start → last end), `host_wall` and marks, in
        nanoseconds."""
        if self.cuda:
            torch.cuda.synchronize()
        self._host1 = time.perf_counter_ns()
        host = self._host1 - self._host0 if self._host0 is not None else 0
        out = {p: 0 for p in PHASES}
        for name, a, b in self._spans:
            out[name] = out.get(name, 0) + self._ns(a, b)
        if self._spans:
            first, last = self._spans[0][1], self._spans[-1][2]
            out["wall"] = self._ns(first, last)
            for name, m in self._marks.items():
                out[name] = self._ns(first, m)
        else:
            out["wall"] = 0
        out["host_wall"] = host
        return out
