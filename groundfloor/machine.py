"""The machine: the CPU's name, and the job's share of it (the CPUs this process may run on,
capped by its cgroup's CPU quota: v2 cpu.max, v1 cfs quota). Interference is judged against this
capacity, and env.json records it."""

from __future__ import annotations

import os
import platform
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def cgroup_dir(root: Path, controller: str) -> Path:
    """This process's cgroup folder for `controller` (v2: the unified one, "")."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, rel = line.split(":", 2)
            if (controller == "" and names == "") or controller in names.split(","):
                base = root / controller if controller else root
                inner = base / rel.lstrip("/")
                return inner if inner.is_dir() else base
    except (OSError, ValueError):
        pass
    return root / controller if controller else root


def cgroup_quota(root: Path = CGROUP) -> float | None:
    """CPUs the job's cgroup may use per period (cgroup v2 cpu.max, v1 cfs quota); None: no cap."""
    try:
        v2 = cgroup_dir(root, "") / "cpu.max"
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        v1 = cgroup_dir(root, "cpu")
        quota = int((v1 / "cpu.cfs_quota_us").read_text())
        return None if quota <= 0 else quota / int((v1 / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None


def job_cpus(root: Path = CGROUP) -> tuple[list[int], float]:
    """(the CPUs this process may run on, its capacity in CPUs): the affinity set, capped by the
    cgroup's quota. Interference is a share of this, not of the host."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = list(range(os.cpu_count() or 1))
    quota = cgroup_quota(root)
    return cpus, min(float(len(cpus)), quota) if quota else float(len(cpus))


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
