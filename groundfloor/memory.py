"""Peak-memory probes around one turn.

CUDA: peak allocated bytes minus bytes allocated at the start (torch's allocator stats).
CPU: peak resident set size minus the RSS at the start; the kernel's high-water mark (VmHWM) is
reset through /proc/self/clear_refs so each turn gets its own peak. Where that file is not
writable the delta is reported as None rather than guessed.
"""

from __future__ import annotations

import re

import torch


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            m = re.search(rf"^{field}:\s+(\d+)\s+kB", f.read(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


class PeakMemory:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.base = None
        self.resettable = True

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the peak RSS
        except OSError:
            self.resettable = False
        rss = _status_kb("VmRSS")
        self.base = rss * 1024 if rss is not None else None

    def peak_delta(self) -> int | None:
        """Bytes above the start level at the peak since start()."""
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.base
        hwm = _status_kb("VmHWM")
        if hwm is None or self.base is None or not self.resettable:
            return None
        return max(0, hwm * 1024 - self.base)
