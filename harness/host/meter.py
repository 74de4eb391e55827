"""What else ran during a measured window, from the kernel's own accounting: the CPU time other processes took on
the cores this cell may use (and the hypervisor's steal on a virtual machine), as a share of those cores' time
(the job's own processes left out: its ranks, their loader workers),
and this process's involuntary context switches. Started after the opening fence, stopped after the closing one
(an Instrument); a background thread samples the same counters so each step can say when it happened."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from harness.catalogue import col
from harness.host.procstat import Counters, foreign_share, foreign_ticks, process_stats, read_proc_stat, steal_share

SAMPLE_INTERVAL_S = 0.25
"""How often the background thread reads the counters (the per-step record's resolution). Each read scans
/proc (a few ms on a loaded machine), on the cell's own cores: 4 a second keep that under 1 % of a core."""


def job_cpu_ticks(proc: Path = Path("/proc"), *, sid: int | None = None, agent_sid: int | None = None) -> int:
    """utime + stime (all threads) of every live process of this job: this process's session (the runner starts
    each job in a session of its own: the cell, its loader workers), and under torchrun the agent's session and
    every rank's (torchrun starts each rank in a session of its own, under the agent) with their workers. A
    process that ended during the window takes its ticks with it: an undercount of the job's own time that reads
    as interference only if such a process burned CPU and exited inside the window."""
    sid = os.getsid(0) if sid is None else sid
    if agent_sid is None and os.environ.get("TORCHELASTIC_RUN_ID"):
        agent_sid = os.getsid(os.getppid())
    stats = process_stats(proc)
    own = {sid}
    if agent_sid is not None:
        own |= {agent_sid} | {s for ppid, s, _ in stats.values() if stats.get(ppid, (0, -1, 0))[1] == agent_sid}
    return sum(ticks for _, s, ticks in stats.values() if s in own)


class InterferenceMeter:
    """Counters at the window's two ends and every SAMPLE_INTERVAL_S between (a thread of its own, which sleeps
    between reads). `read` is the seam tests replace: () -> Counters."""

    def __init__(self, cores: Iterable[int] | None = None, *, read: Callable[[], Counters] | None = None,
                 interval_s: float = SAMPLE_INTERVAL_S):
        self.cores = tuple(sorted(os.sched_getaffinity(0) if cores is None else cores))
        self._read = read or self._read_proc
        self._interval_s = interval_s
        self._samples: list[Counters] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nivcsw = 0

    def _read_proc(self) -> Counters:
        busy, total, steal = read_proc_stat(self.cores)
        return Counters(time.perf_counter(), busy, total, steal, job_cpu_ticks())

    def start(self) -> InterferenceMeter:
        self._nivcsw = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
        self._samples = [self._read()]
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="nvbench-interference", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._samples.append(self._read())

    def stop(self) -> InterferenceMeter:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._samples.append(self._read())
        self._nivcsw = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw - self._nivcsw
        return self

    @property
    def started_at_s(self) -> float:
        """perf_counter time of the first reading (the window's start, before its opening fence)."""
        return self._samples[0].t_s

    def columns(self) -> dict[str, Any]:
        """The window's figures as cells columns (null where the counters said nothing, e.g. no /proc)."""
        first, last = self._samples[0], self._samples[-1]
        tick_s = 1 / os.sysconf("SC_CLK_TCK")
        return {col.foreign_cpu_frac: foreign_share(first, last), col.steal_frac: steal_share(first, last),
                col.foreign_cpu_s: foreign_ticks(first, last) * tick_s, col.steal_s: (last.steal - first.steal) * tick_s,
                col.num_involuntary_switches: self._nivcsw}

    def per_step(self, step_ends_s: np.ndarray) -> np.ndarray:
        """The foreign share over each step, from the samples around it (a step between two samples takes the
        share of the interval it falls in): `step_ends_s` are perf_counter times of each step's end, in order."""
        samples = self._samples
        times = np.array([s.t_s for s in samples])
        out = np.full(len(step_ends_s), np.nan)
        start = samples[0].t_s
        for i, end in enumerate(step_ends_s):
            lo = max(int(np.searchsorted(times, start, side="right")) - 1, 0)
            hi = min(int(np.searchsorted(times, end, side="left")), len(samples) - 1)
            if hi > lo:
                share = foreign_share(samples[lo], samples[hi])
                out[i] = np.nan if share is None else share
            start = end
        return out
