"""Noticing other work on the machine, and choosing which repeats of a unit to believe.

Each turn is bracketed by a groundfloor.load.LoadProbe (the load average, other work's share
of the job's CPUs, the hypervisor's steal time). A unit
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

import statistics
from dataclasses import dataclass


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
