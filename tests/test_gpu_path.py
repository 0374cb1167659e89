"""What the CUDA path must not do in a decode round, checked on the CPU: read a device tensor
back to the host inside the engine's forward, copy through pageable memory, allocate timing
events per round."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_llama

from engines.base import tree_mask
from engines.load import wrap
from groundfloor import clock as clock_mod
from groundfloor.devices import host_tensor, to_device

READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")


@pytest.fixture
def reads(monkeypatch):
    """Counts every read of a tensor's value back to the host (a sync on CUDA)."""
    seen = []
    for name in READS:
        real = getattr(torch.Tensor, name)

        def spy(self, *a, _real=real, _name=name, **kw):
            seen.append(_name)
            return _real(self, *a, **kw)

        monkeypatch.setattr(torch.Tensor, name, spy)
    return seen


def test_a_lean_forward_reads_nothing_back(reads):
    eng = wrap(tiny_llama(0), "lean")
    cache = eng.new_cache(64)
    eng.forward(torch.tensor([[5, 6, 7, 8]]), cache, logits_to_keep=1)  # prefill
    reads.clear()
    eng.forward(torch.tensor([[9]]), cache)  # one decode step
    depth = torch.tensor([0, 1, 1, 2])  # a verify over a small tree, positions and mask given
    anc = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    eng.forward(
        torch.tensor([[10, 11, 12, 13]]),
        cache,
        positions=(cache.length + depth)[None],
        mask=tree_mask(anc, cache.length),
    )
    assert reads == []


def test_host_copies_are_plain_on_the_cpu(monkeypatch):
    def no_pinning(self):
        raise AssertionError("pinned memory needs CUDA")

    monkeypatch.setattr(torch.Tensor, "pin_memory", no_pinning)
    t = to_device(torch.arange(3), "cpu")
    assert t.tolist() == [0, 1, 2]
    assert host_tensor([4, 5], torch.long, "cpu").tolist() == [4, 5]


def test_cuda_events_are_allocated_once_and_reused(monkeypatch):
    made = []

    class Event:
        def __init__(self, enable_timing=False):
            made.append(self)
            self.t = 0.0

        def record(self):
            self.t = float(len(made))

        def elapsed_time(self, other):
            return other.t - self.t

    monkeypatch.setattr(clock_mod.torch.cuda, "Event", Event)
    monkeypatch.setattr(clock_mod.torch.cuda, "synchronize", lambda *a: None)
    c = clock_mod.Clock(torch.device("cuda"))
    for _ in range(3):  # three turns of three phases
        c.reset()
        for name in ("prefill", "draft", "verify"):
            with c.phase(name):
                pass
        c.read()
    assert len(made) == 6  # one pair per phase of a turn, not per phase of every turn


def test_the_clock_reads_the_hosts_wall_time_beside_the_events(monkeypatch):
    """host_wall runs from the first span's start to the read after the synchronize: on CUDA it
    is what bench.tools.gpu_check holds the events' wall against; each reset starts it again."""
    import time

    waited = []
    monkeypatch.setattr(clock_mod.torch.cuda, "synchronize", lambda *a: waited.append(1))
    c = clock_mod.Clock(torch.device("cpu"))
    for _ in range(2):
        c.reset()
        with c.phase("verify"):
            time.sleep(0.02)
        time.sleep(0.01)
        t = c.read()
        assert 0.02e9 <= t["wall"] < t["host_wall"] < 0.5e9
        assert t["host_wall"] - t["wall"] >= 0.01e9
    assert not waited  # the CPU clock never synchronizes
    c.reset()
    assert c.read()["host_wall"] == 0


def test_cuda_graph_recordings_are_counted_and_refused_inside_a_timed_turn(monkeypatch):
    """reduce-overhead records a CUDA graph per new shape; the compile check counts recordings
    (torch's CUDAGraph.capture_begin, wrapped once) beside dynamo's graphs, and a timed turn
    that recorded one is refused, naming the count that grew."""
    from types import SimpleNamespace

    from bench.run.runner import Runner
    from engines import lean

    calls = []
    monkeypatch.setattr(
        torch.cuda.graphs.CUDAGraph, "capture_begin", lambda self, *a, **k: calls.append(a)
    )
    monkeypatch.setattr(lean, "CAPTURES", [0])
    lean.count_cuda_graphs()
    lean.count_cuda_graphs()  # wrapped once, not twice
    before = lean.LeanEngine.graphs()
    torch.cuda.graphs.CUDAGraph.capture_begin(object(), "pool")
    assert calls == [("pool",)] and lean.CAPTURES == [1]
    after = lean.LeanEngine.graphs()
    assert after["cuda_graphs"] == before["cuda_graphs"] + 1
    target = SimpleNamespace(compiled=True, graphs=lambda: after)
    with pytest.raises(RuntimeError, match=r"cuda_graphs 0 → 1"):
        Runner.check_no_recompile(SimpleNamespace(target=target, graphs=before), "prompt p")
    Runner.check_no_recompile(SimpleNamespace(target=target, graphs=after), "prompt p")
