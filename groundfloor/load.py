"""Other work on this machine, read around a span of our own: the 1-minute load average, the
CPU time others took from this job (busy time of the CPUs in the job's affinity set from
/proc/stat minus this process's own from /proc/self/stat, as a share of those CPUs; under a
cgroup CPU quota also the rest of the job's cgroup, as a share of the quota), the hypervisor's
steal time and, on a GPU, the other processes NVML sees. The run (bench.run.interference) judges
from these readings which repeats to believe.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from groundfloor.machine import CGROUP, cgroup_dir, job_cpus

HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# /proc/stat counts CPU time in ticks (HZ: 10 ms): a window of a few ms can read no other work
# beside a hog; a window that must tell is kept open this long at least (LoadProbe.stop)
MIN_WINDOW_S = 0.25


def _cgroup_usage_jiffies(root: Path = CGROUP) -> int | None:
    """CPU time of every process in this job's cgroup (v2 cpu.stat, v1 cpuacct.usage)."""
    try:
        v2 = cgroup_dir(root, "") / "cpu.stat"
        if v2.is_file():
            for line in v2.read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) * HZ // 1_000_000
        usage = cgroup_dir(root, "cpuacct") / "cpuacct.usage"
        return int(usage.read_text()) * HZ // 1_000_000_000
    except (OSError, ValueError):
        return None


def _proc_stat(cpus: list[int] | None = None) -> tuple[int, int] | None:
    """(busy jiffies, steal jiffies) of the CPUs `cpus` (None: all) from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            lines = [ln.split() for ln in f if ln.startswith("cpu")]
    except OSError:
        return None
    want = {f"cpu{c}" for c in cpus} if cpus is not None else None
    rows = [ln[1:] for ln in lines if (ln[0] in want if want else ln[0] == "cpu")]
    if not rows:  # no per-CPU lines: the machine's total
        rows = [ln[1:] for ln in lines if ln[0] == "cpu"]
    busy = steal = 0
    for parts in rows:
        v = [int(x) for x in parts]
        idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
        guest = sum(v[8:10]) if len(v) > 9 else 0  # counted inside user/nice already
        busy += sum(v) - idle - guest
        steal += v[7] if len(v) > 7 else 0
    return busy, steal


def _self_jiffies() -> int | None:
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime (this process, all threads)
    except (OSError, IndexError, ValueError):
        return None


def _loadavg() -> float | None:
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return None


class LoadProbe:
    """Brackets one turn: `start()`, then `stop()` → {load1, others_cpu, steal}, shares of the
    job's own capacity (job_cpus): others' busy time on the CPUs this process may use, and,
    under a cgroup quota, others' time inside the job's cgroup, whichever is larger."""

    def __init__(self, cgroup_root: Path = CGROUP, device=None):
        self.root = cgroup_root
        self.gpu = gpu_handle(device)
        self.cpus, self.capacity = job_cpus(cgroup_root)
        self.capped = self.capacity < len(self.cpus)

    def start(self) -> None:
        self.t0, self.stat0, self.self0 = time.monotonic(), _proc_stat(self.cpus), _self_jiffies()
        self.group0 = _cgroup_usage_jiffies(self.root) if self.capped else None

    def stop(self, at_least: float = 0.0) -> dict:
        """The window's reading; with `at_least`, the window is first kept open (this process
        asleep: whatever runs then is others' work) until it spans that many seconds."""
        time.sleep(max(0.0, at_least - (time.monotonic() - self.t0)))
        dt = time.monotonic() - self.t0
        stat1, self1 = _proc_stat(self.cpus), _self_jiffies()
        out = {"load1": _loadavg(), "others_cpu": None, "steal": None}
        if None in (self.stat0, stat1, self.self0, self1) or dt <= 0:
            return out
        mine = self1 - self.self0
        on_cpus = dt * HZ * len(self.cpus)  # jiffies the job's CPUs had
        others = max(0.0, ((stat1[0] - self.stat0[0]) - mine) / on_cpus)
        if self.group0 is not None:  # a quota: others in the job's cgroup eat its share
            group1 = _cgroup_usage_jiffies(self.root)
            if group1 is not None:
                inside = (group1 - self.group0 - mine) / (dt * HZ * self.capacity)
                others = max(others, inside)
        out["others_cpu"] = round(others, 4)
        if self.gpu is not None:
            out["gpu_others"] = gpu_others(self.gpu)
        out["steal"] = round(max(0.0, (stat1[1] - self.stat0[1]) / on_cpus), 4)
        return out


def gpu_handle(device):
    """An NVML handle for a CUDA `device` (None on CPU, or without the nvidia-ml-py package)."""
    if device is None or getattr(device, "type", str(device)) != "cuda":
        return None
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        index = device.index if device.index is not None else torch.cuda.current_device()
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no NVML (a driver without it, or the package not installed)
        return None


def gpu_others(handle) -> int | None:
    """Processes other than this one running on the GPU (compute and graphics), from NVML."""
    try:
        import pynvml

        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        procs += pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)
    except Exception:
        return None
    return len({p.pid for p in procs} - {os.getpid()})
