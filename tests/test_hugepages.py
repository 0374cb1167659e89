"""engines.hugepages: weights moved into 2 MB pages keep their values, identity and users, and
groundfloor.clock.settle_heap freezes the heap built so far."""

import gc

import pytest
import torch

from engines import hugepages


def test_placed_tensors_keep_values_identity_and_views_stay_apart(monkeypatch):
    monkeypatch.setenv("SPECSWEEP_HUGEPAGES", "1")
    if not hugepages.available():
        pytest.skip("no transparent huge pages on this system")
    big = torch.randn(700_000)  # 2.8 MB: over one 2 MB page
    small = torch.arange(1000, dtype=torch.int32)
    view = big[10:20]  # a view: not its storage's only user, left where it is
    want_big, want_small = big.clone(), small.clone()
    holder = [big]  # whatever held the tensor (a native Stack) sees the new bytes
    before = big.data_ptr()
    moved = hugepages.place([big, small, view, big])
    assert moved >= big.numel() * 4 + small.numel() * 4
    assert big.data_ptr() != before and big.data_ptr() % 64 == 0
    assert holder[0] is big and torch.equal(big, want_big) and torch.equal(small, want_small)
    assert torch.equal(view, want_big[10:20])
    assert hugepages.placed_bytes() >= moved


def test_nothing_moves_when_turned_off_or_too_small(monkeypatch):
    t = torch.randn(700_000)
    monkeypatch.setenv("SPECSWEEP_HUGEPAGES", "0")
    ptr = t.data_ptr()
    assert hugepages.place([t]) == 0 and t.data_ptr() == ptr
    monkeypatch.setenv("SPECSWEEP_HUGEPAGES", "1")
    small = torch.randn(1000)
    ptr = small.data_ptr()
    assert hugepages.place([small]) == 0 and small.data_ptr() == ptr


def test_a_native_product_reads_placed_weights_with_the_same_bits(monkeypatch):
    from drafters.weights import native_ready, to_linear

    if not native_ready("cpu"):
        pytest.skip("no native kernels")
    monkeypatch.setenv("SPECSWEEP_HUGEPAGES", "1")
    torch.manual_seed(0)
    lin = to_linear(torch.randn(2048, 1024))  # int8: 2 MB of weights
    x = torch.randn(3, 1024)
    want = lin(x)
    hugepages.place_module(lin)
    assert torch.equal(lin(x), want)


def test_settle_heap_freezes_what_exists_and_thaws_the_last_freeze():
    """Everything alive is frozen; garbage that an earlier freeze held (a reference cycle that
    died after it) is reclaimed by the next call, not kept for good."""
    import weakref

    from groundfloor.clock import settle_heap

    class Node:
        pass

    try:
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the cyclic collector frees it
        alive = weakref.ref(a)
        settle_heap()
        assert gc.get_freeze_count() > 0
        del a, b
        gc.collect()
        assert alive() is not None  # frozen: a collection does not look at it
        settle_heap()
        assert alive() is None  # the earlier freeze undone, the dead cycle collected
    finally:
        gc.unfreeze()
