"""Host → device copies for the decode loop: pinned and non-blocking on CUDA, so a round's few
host-side numbers (accepted tokens, a tree's depths and ancestors) do not stall the host on a
pageable copy; on the CPU a plain tensor."""

from __future__ import annotations

import torch


def to_device(t: torch.Tensor, device) -> torch.Tensor:
    """`t` (a host tensor) on `device`: through pinned memory without blocking on CUDA (the copy
    is ordered on the current stream; torch's pinned allocator keeps the buffer until it ran)."""
    device = torch.device(device)
    if device.type != "cuda" or t.device.type == "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def host_tensor(values, dtype: torch.dtype, device) -> torch.Tensor:
    """torch.tensor(values) on `device`, copied as `to_device` does."""
    return to_device(torch.tensor(values, dtype=dtype), device)
