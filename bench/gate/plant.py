"""The gate's self-test: a tree under test that is `fraction` slower in every turn, every method
alike (`python -m bench.gate --plant-slowdown 0.15`; only B's worker plants it).

A turn's wall time is read by its clock (groundfloor.clock.Clock.read: first span's start to
the last span's end). The planted clock, before it reads, sleeps `fraction` × the wall so far in
one more span of its own, so the turn's measured wall is (1 + fraction) × what it was:

    wall' = wall + fraction · wall        tokens/s' = tokens/s ÷ (1 + fraction)

for ar and for every drafting method (a sleep in target forwards, the old --plant-delay, slowed
ar most: a method that saves forwards saves some of the sleep). A batch run's wall is the union
of its turns' clocked intervals (bench.decode.batch.Batch.run): the same sleep, on that wall,
is added to it as one more span right after the run.
Installed after warm-up and k=auto's calibration, so that the costs k=auto plans with are the
tree's own; k=auto reads each round's own spans, which the sleep (after the last round) is not.
"""

from __future__ import annotations

import time

from groundfloor.clock import Clock


class PlantedClock(Clock):
    def __init__(self, device, fraction: float):
        super().__init__(device)
        self.fraction = fraction

    def read(self) -> dict[str, int]:
        if self._spans and self.fraction > 0:
            so_far = self._ns(self._spans[0][1], self._spans[-1][2]) / 1e9
            with self.phase("other"):  # inside the clock: the turn's wall grows
                time.sleep(self.fraction * so_far)
        return super().read()


def plant_turns(runner, fraction: float) -> None:
    """Every later turn of `runner` (one sequence at a time) `fraction` slower."""
    runner.clock = PlantedClock(runner.device, fraction)


def plant_batch(batch, fraction: float) -> None:
    """Every later run of `batch` (bench.decode.batch.Batch) `fraction` slower: its wall (the
    time some sequence was inside its turn's clock) is followed by a sleep of `fraction` × that
    wall, added to it as one more clocked span after the last turn's."""
    run = batch.run

    def slower(*args, **kwargs):
        out = run(*args, **kwargs)
        t0 = time.perf_counter()
        time.sleep(fraction * out.wall_s)
        out.wall_s += time.perf_counter() - t0
        return out

    batch.run = slower
