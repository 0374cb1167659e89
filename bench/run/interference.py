"""Noticing other work on the machine, and choosing which repeats of a unit to believe.

Each turn is bracketed by a LoadProbe: the 1-minute load average, the CPU time other work took
from this job during the turn (busy time of the CPUs in the job's affinity set from /proc/stat
minus this process's own from /proc/self/stat, as a share of those CPUs; under a cgroup CPU
quota also the rest of the job's cgroup, as a share of the quota) and the hypervisor's steal
time. A unit
(prompt × turn) is *disturbed* when
    * its repeats disagree: per-token time max/min > `ratio` on either side (baseline, method);
    * any repeat ran while others used more than `others` of the machine, or while the
      hypervisor stole more than `others` of it;
    * a side's decode time per token lies far above the run's robust band for that side
      (above 1.5 × the median and the median + 5 MAD of the units measured so far).
Disturbed units are re-measured (interleaved pairs, as before) up to `remeasure` rounds; a
repeat is *quiet* when it saw no interference and is within `ratio` of its side's fastest
repeat; speedups use pairs whose two repeats are both quiet. docs/metrics.md has the rules.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
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


@dataclass
class Rules:
    ratio: float = 1.25  # repeats of one side may differ by this factor
    others: float = 0.25  # share of the machine other work (or steal) may take during a turn


def per_token(res) -> float:
    """Seconds per new token of a turn (prefill included, as speedups are)."""
    return res.times_ns["wall"] / 1e9 / max(len(res.output_ids), 1)


def decode_per_token(res) -> float | None:
    n = len(res.output_ids)
    if n < 2:
        return None
    return (res.times_ns["wall"] - res.times_ns.get("ttft", 0)) / 1e9 / (n - 1)


def interfered(load: dict, rules: Rules) -> bool:
    """Other work took more than `others` of the job's CPUs, the hypervisor stole it, or another
    process ran on the job's GPU."""
    if load.get("gpu_others"):
        return True
    return any(load.get(k) is not None and load[k] > rules.others for k in ("others_cpu", "steal"))


class Band:
    """The run's robust band of decode time per token, per side, from units seen so far."""

    def __init__(self):
        self.seen: dict[str, list[float]] = {"baseline": [], "method": []}

    def outside(self, role: str, value: float | None) -> bool:
        xs = self.seen[role]
        if value is None or len(xs) < 4:
            return False
        med = statistics.median(xs)
        mad = statistics.median(abs(x - med) for x in xs)
        return value > 1.5 * med and value > med + 5 * mad

    def add(self, role: str, value: float | None) -> None:
        if value is not None:
            self.seen[role].append(value)


def judge(sides: dict, rules: Rules, band: Band) -> tuple[bool, dict]:
    """sides: {role: [(result, load) per repeat]} for one unit → (disturbed, quiet flags)."""
    quiet, disturbed = {}, False
    for role, reps in sides.items():
        times = [per_token(r) for r, _ in reps]
        fastest = min(times)
        flags = []
        for (res, load), t in zip(reps, times):
            ok = (
                not interfered(load, rules)
                and t <= rules.ratio * fastest
                and not band.outside(role, decode_per_token(res))
            )
            flags.append(ok)
        quiet[role] = flags
        if max(times) > rules.ratio * fastest or not all(flags):
            disturbed = True
    return disturbed, quiet


def quiet_pairs(quiet: dict) -> list[int]:
    """Repeat indices whose baseline and method repeats are both quiet."""
    return [r for r, (a, b) in enumerate(zip(quiet["baseline"], quiet["method"])) if a and b]


def judge_turns(runs: dict, rules: Rules, band: Band, repeats: int) -> list[dict]:
    """runs: {role: [conversation per repeat]}, a conversation being [(ids, result, peak, load)
    per turn] → per turn: disturbed?, quiet flags per side, clean (enough quiet pairs)."""
    out = []
    need = min(2, repeats)
    for t in range(len(runs["baseline"][0])):
        reps = {
            role: [(conv[t][1], conv[t][3]) for conv in runs[role]]
            for role in ("baseline", "method")
        }
        disturbed, quiet = judge(reps, rules, band)
        clean = len(quiet_pairs(quiet)) >= need
        out.append({"disturbed": disturbed, "quiet": quiet, "reps": reps, "clean": clean})
    return out


def measure(pair, repeats: int, remeasure: int, rules: Rules, band: Band) -> dict:
    """`repeats` interleaved pairs (`pair(runs, r)` appends one conversation per side), then up to
    `remeasure` more while a turn lacks enough quiet pairs; the quiet repeats join the band.
    → {role: [conversation per repeat], "judged": per turn (judge_turns, plus `disturbed` as
    first judged and `remeasured`, the extra pairs run)}."""
    runs = {"baseline": [], "method": []}
    for r in range(repeats):
        pair(runs, r)
    units = judge_turns(runs, rules, band, repeats)
    first = [u["disturbed"] for u in units]
    extra = 0
    while any(not u["clean"] for u in units) and extra < remeasure:
        pair(runs, len(runs["baseline"]))
        extra += 1
        units = judge_turns(runs, rules, band, repeats)
    for u, was in zip(units, first):
        u.update(disturbed=was, remeasured=extra)
        for role in ("baseline", "method"):
            for (res, _), ok in zip(u["reps"][role], u["quiet"][role]):
                if ok:
                    band.add(role, decode_per_token(res))
    runs["judged"] = units
    return runs
