"""The kernel's accounting of CPU time, read from /proc: per-core busy ticks (/proc/stat) and each process's own
(/proc/PID/stat), and the one formula for the share of some cores' time other processes took between two readings
(foreign_share). Shared by the cell's interference meter (harness.host.meter), which measures a window,
and the A/B (harness.orchestrate.workflows.rerun), which waits for a neighbour to leave before a re-run."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC_STAT_ENV = "NVBENCH_PROC_STAT"
"""The file read as /proc/stat when set: a constructed machine (a test that must see its cores quiet whatever else runs
beside it writes one whose cores stay idle). Inherited by every process a command starts, so a cell's meter and the
A/B that waits for quiet read the same machine. Unset: /proc/stat."""
_BUSY = (0, 1, 2, 5, 6, 7)
"""/proc/stat per-core fields counted as busy: user, nice, system, irq, softirq, steal (not idle, iowait)."""
_STEAL = 7


def read_proc_stat(cores: Iterable[int], text: str | None = None) -> tuple[int, int, int]:
    """(busy, total, steal) ticks summed over `cores`, from /proc/stat (or `text`, its contents)."""
    wanted = {f"cpu{c}" for c in cores}
    busy = total = steal = 0
    if text is None:
        text = Path(os.environ.get(PROC_STAT_ENV) or "/proc/stat").read_text()
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name in wanted:
            fields = [int(x) for x in rest.split()]
            busy += sum(fields[i] for i in _BUSY if i < len(fields))
            total += sum(fields[:8])
            steal += fields[_STEAL] if len(fields) > _STEAL else 0
    return busy, total, steal


def process_stats(proc: Path = Path("/proc")) -> dict[int, tuple[int, int, int]]:
    """pid -> (parent, session, utime + stime ticks of all its threads) of every live process."""
    stats: dict[int, tuple[int, int, int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
            # fields 4 and 6 of the line: the parent, the session; 14 and 15: utime, stime
            stats[int(entry.name)] = (int(fields[1]), int(fields[3]), int(fields[11]) + int(fields[12]))
        except (OSError, ValueError, IndexError):  # gone between the listing and the read (or read as it went)
            continue
    return stats


def tree_cpu_ticks(root: int, proc: Path = Path("/proc")) -> int:
    """utime + stime of `root` and every live process under it (an A/B's own: its jobs, their workers)."""
    children: dict[int, list[int]] = {}
    stats = process_stats(proc)
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += stats[pid][2] if pid in stats else 0
        todo += children.get(pid, [])
    return total


@dataclass(frozen=True, slots=True)
class Counters:
    """One reading: busy and total ticks summed over some cores, their steal, and our own CPU ticks (the cell's job,
    or the A/B's process tree)."""

    t_s: float
    busy: int
    total: int
    steal: int
    own: int


def foreign_ticks(a: Counters, b: Counters) -> int:
    """Ticks of the cores between two readings that processes other than ours used: busy - own, clamped at 0 (tick
    rounding never reads negative)."""
    return max(0, (b.busy - a.busy) - (b.own - a.own))


def foreign_share(a: Counters, b: Counters) -> float | None:
    """Share of the cores' time between two readings that processes other than ours used (foreign_ticks / total,
    at most 1), None when no time passed on those cores."""
    total = b.total - a.total
    return None if total <= 0 else min(1.0, foreign_ticks(a, b) / total)


def steal_share(a: Counters, b: Counters) -> float | None:
    """Share of the cores' time the hypervisor gave another guest between two readings."""
    total = b.total - a.total
    return None if total <= 0 else (b.steal - a.steal) / total
